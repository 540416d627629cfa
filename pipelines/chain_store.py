"""The chain on a run directory that is a store URL: the steps that need a disk work in a local staging folder.

The tokenizer and the mixture builder read parquet files and write folders on a local disk; for an ``s3://``
run they read a copy of the run's kept documents (``deduped/`` or ``curated/``, fetched once into the node's
scratch) and their outputs are uploaded to the run's URL, their marker last (``tokenizer.json``,
``manifest.json``), so a rerun that finds the marker skips the step and one that does not redoes it. The
trainer reads and writes the store itself (``trainer/store.py``); its export is fetched back for the final
evaluation, whose ``eval.json`` goes to the store next to it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.atomic import atomic_write_bytes, store_twins
from common.run_dir import is_visible
from common.transfer import FolderFetch, FolderUpload, download_folder, fetch_kept_documents, upload_folder
from pipelines.errors import ExecutorError

if TYPE_CHECKING:
    from mixtures.manifest import Manifest
    from mixtures.sources import Arriving

TRAIN_RECORDS = ("run_config.json", "metrics.jsonl", "eval.json")  # what the final evaluation reads and caches


class StoreStaging:
    """Local copies of a store run's folders, in a temp folder removed at the end (``staging()``)."""

    def __init__(self, run_dir: Path, local: Path) -> None:
        self.run_dir, self.local = run_dir, local
        self._documents: FolderFetch | None = None

    def folder(self, name: str) -> Path:
        """The local twin of ``run_dir/name`` (not fetched)."""
        return self.local / name

    def documents(self, wait: bool = True) -> Path:
        """A local run folder holding a copy of the run's kept documents (fetched on first use). Without
        `wait`, the copies may still be on their way (the store listed, the GETs begun in the background):
        ``build_mixture`` tokenizes each file as it lands."""
        docs = self.local / "documents" / self.run_dir.name  # the run's name: the mixture's source name
        if self._documents is None:
            self._documents = fetch_kept_documents(str(self.run_dir), docs)
            if self._documents is None:
                raise ExecutorError(
                    f"{self.run_dir} holds no documents to train on (no parquet in deduped/ or curated/)"
                )
        if wait:
            self._documents.wait_all()
        return docs

    def fetch(self, name: str) -> Path:
        """``run_dir/name`` copied down (once) to its local twin."""
        local = self.folder(name)
        if not local.is_dir():
            download_folder(str(self.run_dir / name), local)
        return local

    def fetch_with_documents(self, name: str) -> Path:
        """``fetch(name)`` with ``documents()`` begun first: their listings and GETs overlap instead of following
        each other (a rerun whose tokenizer is on the store but not here fetches both), and the documents may
        still be arriving when this returns."""
        self.documents(wait=False)
        return self.fetch(name)

    def publish(self, name: str, marker: str) -> None:
        """The local twin of ``run_dir/name`` up to the store, ``marker`` last."""
        upload_folder(self.folder(name), str(self.run_dir / name), last=marker)

    def build_mixture(self, spec: dict[str, Any], name: str, progress: bool = True) -> Manifest:
        """``build_mixture`` into the local twin of ``run_dir/name``, each shard's files uploaded as soon as the
        shard is written (``FolderUpload``: while the other shards are written, not after the last one), and
        ``manifest.json`` last, once every shard landed: a build killed at any point leaves no manifest, or one
        whose every file is on the store. The local twin's files are not fsynced (``store_twins``: the store
        holds the durable copy; they are renamed whole as before). Documents still on their way
        (``documents(wait=False)``) are tokenized each as it lands, not once all are (``mixtures.sources.Arriving``)."""
        from mixtures.build import build_mixture
        from mixtures.manifest import MANIFEST_NAME

        local = self.folder(name)
        with FolderUpload(local, str(self.run_dir / name)) as upload, store_twins(local):
            manifest = build_mixture(
                spec,
                local,
                overwrite=True,
                progress=progress,
                on_shard=upload.send,
                arriving=self._arriving(),
            )
            upload.finish(last=MANIFEST_NAME)
        return manifest

    def _arriving(self) -> dict[str, Arriving]:
        """The documents, by the mixture's source name, while they are being fetched (none once all landed: the
        build then reads them as any local files)."""
        from mixtures.sources import Arriving

        fetch = self._documents
        if fetch is None or fetch.landed():
            return {}
        parquet = sorted(p for p in fetch.details if p.name.endswith(".parquet") and is_visible(p))
        stamps = tuple(f"{fetch.details[p].get('size')} {fetch.details[p].get('ETag')}" for p in parquet)
        return {self.run_dir.name: Arriving(tuple(parquet), stamps, fetch.wait)}

    def close(self) -> None:
        """Stop fetching (a build that failed while its documents were arriving)."""
        if self._documents is not None:
            self._documents.close()

    def fetch_training(self, name: str) -> Path:
        """The trained model's export and records, for the final evaluation."""
        local = self.folder(name)
        download_folder(str(self.run_dir / name / "hf"), local / "hf")
        for record in TRAIN_RECORDS:
            remote = self.run_dir / name / record
            if remote.is_file():
                (local / record).write_bytes(remote.read_bytes())
        return local

    def publish_evaluation(self, name: str, report: str) -> None:
        atomic_write_bytes(str(self.run_dir / name / report), (self.folder(name) / report).read_bytes())


@contextlib.contextmanager
def staging(run_dir: Path) -> Iterator[StoreStaging]:
    """A staging folder for ``run_dir`` under the temp dir (the run's ``--scratch``), removed on exit."""
    with tempfile.TemporaryDirectory(prefix="chain-") as local:
        staged = StoreStaging(run_dir, Path(local))
        try:
            yield staged
        finally:
            staged.close()
