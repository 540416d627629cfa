"""Copies between a store and a local folder, for steps that need their files on a disk (the trainer, the
tokenizer's and the mixture's inputs): whole folders down, files up one object each, a completion marker last.

An object becomes visible only once its upload completes (one PUT, or a completed multipart upload), so a
reader never sees a partial file; a folder is complete when its marker (a manifest, a ``config.json``) is
there, which is why ``upload_folder`` sends it after everything else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.lock import LOCK_NAME
from common.object_lock import READERS
from common.run_dir import KEPT_ORDER, is_visible
from common.storage import filesystem


def _lock_object(rel: str) -> bool:
    """A folder's lock or a reader's lease (common/object_lock.py): who uses the folder, not its data."""
    parts = rel.split("/")
    return parts[-1] == LOCK_NAME or READERS in parts[:-1]


def _objects_under(fs: Any, key: str) -> list[str]:
    """The data objects under `key` (one listing; not the folder's lock or readers' leases)."""
    return [name for name in fs.find(key) if name != key and not _lock_object(name[len(key) + 1 :])]


def _fetch(fs: Any, key: str, found: list[str], local: Path) -> list[str]:
    """The objects `found` under `key` into `local` (same relative names), fetched together; those names."""
    rel = [name[len(key) + 1 :] for name in found]
    targets = [str(local / r) for r in rel]
    for target in targets:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    fs.get(found, targets)  # s3fs fetches them concurrently: one GET each, no look-up first
    return rel


def download_folder(url: str, local: Path) -> list[str]:
    """Every object under `url` into `local` (same relative names); their names. A missing or empty prefix
    is a FileNotFoundError naming the URL."""
    fs, key = filesystem(url)
    key = key.rstrip("/")
    found = _objects_under(fs, key)
    if not found:
        raise FileNotFoundError(f"{url}: no such folder on the store (nothing under it)")
    return _fetch(fs, key, found, local)


def download_kept_documents(run_dir: str, local: Path) -> str | None:
    """The run's kept documents copied into `local/<folder>`: ``deduped/`` when it holds parquet, else
    ``curated/`` (``common.run_dir.kept_documents_dir``); the folder's name, None when neither holds any.

    One listing per folder looked at, then the objects' GETs together: the folder test, its recursive glob, a
    HEAD per parquet file and the download's own listing were three round trips and a HEAD per file more, one
    after another, a fixed cost of every chain step that reads the documents (``bench.object_store``)."""
    fs, key = filesystem(run_dir)
    for name in KEPT_ORDER:
        folder = f"{key.rstrip('/')}/{name}"
        found = _objects_under(fs, folder)
        if any(n.endswith(".parquet") and is_visible(Path(n)) for n in found):
            _fetch(fs, folder, found, local / name)
            return name
    return None


def download_input(url: str, local: Path) -> Path:
    """A file (tokenizer.json) or folder (a mixture) on the store, copied under `local`; the local path."""
    fs, key = filesystem(url)
    if fs.isfile(key):
        local.mkdir(parents=True, exist_ok=True)
        target = local / Path(key).name
        fs.get_file(key, str(target))
        return target
    download_folder(url, local)
    return local


def upload_files(files: dict[str, Path], url: str) -> None:
    """Each local file to `url/<relative name>`: one PUT (or completed multipart upload) each, so a reader
    sees a file whole or not at all."""
    if not files:
        return
    fs, key = filesystem(url)
    names = sorted(files)
    fs.put([str(files[n]) for n in names], [f"{key.rstrip('/')}/{n}" for n in names])


def upload_folder(local: Path, url: str, last: str | None = None) -> None:
    """Every file of `local` to `url` (not the local folder's lock: it guards that folder, not the data), `last`
    (a completion marker) after all the others."""
    files = {
        p.relative_to(local).as_posix(): p for p in sorted(local.rglob("*")) if p.is_file() and p.name != LOCK_NAME
    }
    marker = files.pop(last, None) if last is not None else None
    upload_files(files, url)
    if marker is not None:
        upload_files({last: marker}, url)  # type: ignore[dict-item]
