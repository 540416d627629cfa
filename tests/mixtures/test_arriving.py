"""A build whose parquet files are still being copied in (``mixtures.sources.Arriving``: a store run's documents
fetched while the build runs, ``pipelines/chain_store.py``): each file is read only once it is there, tokenizing
begins before the last one lands, and the shards and manifest are those of a build of the files already there,
byte for byte."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from mixtures.build import TMP_DIR, build_mixture
from mixtures.pool import available_cores
from mixtures.sources import Arriving
from tests.support.text_corpora import web_documents, write_parquet


def spec_of(folder: Path, tok: Path) -> dict:
    return {
        "tokenizer": str(tok),
        "target_tokens": "epoch",
        "seq_len": 64,
        "seed": 0,
        "tokens_per_file": 4_000,
        "sources": [{"name": "web", "path": str(folder)}],
    }


class CopiedIn:
    """Files that land in `folder` only when the build waits for them (copied from `origin` then): a read
    before its wait finds no file. Records, at the last file's wait, the parts the build had tokenized."""

    def __init__(self, origin: list[Path], folder: Path, out: Path) -> None:
        self.origin = {folder / p.name: p for p in origin}
        self.out, self.last = out, folder / origin[-1].name
        self.parts_before_last: list[str] | None = None
        self.lock = threading.Lock()
        folder.mkdir(parents=True)

    def wait(self, path: Path) -> None:
        with self.lock:
            if path == self.last:
                self.parts_before_last = sorted(p.name for p in (self.out / TMP_DIR).glob("*.tok"))
            if not path.exists():
                shutil.copyfile(self.origin[path], path)

    def arriving(self) -> Arriving:
        files = tuple(sorted(self.origin))
        return Arriving(files, tuple(f"stamp-{f.name}" for f in files), self.wait)


def test_files_are_tokenized_as_they_arrive_into_the_same_shards(tok4k: Path, tmp_path: Path) -> None:
    # more files than tokenizing threads (one per core): the last file's turn comes once a thread is free
    files = write_parquet(web_documents()[:60], tmp_path / "here", n_files=available_cores() + 1)
    reference = build_mixture(spec_of(tmp_path / "here", tok4k), tmp_path / "reference", progress=False)
    assert len(reference.files) >= 2

    copied = CopiedIn(files, tmp_path / "arriving", tmp_path / "out")
    arriving = {"web": copied.arriving()}
    built = build_mixture(spec_of(tmp_path / "arriving", tok4k), tmp_path / "out", progress=False, arriving=arriving)

    assert copied.parts_before_last, "the last file was waited for before any other file was tokenized"
    assert built.files == reference.files
    names = sorted(p.name for p in (tmp_path / "reference").iterdir() if not p.name.startswith("."))
    assert names == sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith("."))
    for name in names:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name


def test_an_arriving_file_without_the_column_stops_the_build_before_any_shard(tok4k: Path, tmp_path: Path) -> None:
    files = write_parquet([{"body": r["text"]} for r in web_documents()[:20]], tmp_path / "here", n_files=2)
    copied = CopiedIn(files, tmp_path / "arriving", tmp_path / "out")
    with pytest.raises(ValueError, match=r"source 'web': .*part_0000[01]\.parquet: no `text` column"):
        build_mixture(
            spec_of(tmp_path / "arriving", tok4k), tmp_path / "out", progress=False, arriving={"web": copied.arriving()}
        )
    assert not list((tmp_path / "out").glob("*.ds*")) and not (tmp_path / "out" / "manifest.json").exists()
