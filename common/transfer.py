"""Copies between a store and a local folder, for steps that need their files on a disk (the trainer, the
tokenizer's and the mixture's inputs): whole folders down, files up one object each, a completion marker last.

An object becomes visible only once its upload completes (one PUT, or a completed multipart upload), so a
reader never sees a partial file; a folder is complete when its marker (a manifest, a ``config.json``) is
there, which is why ``upload_folder`` and ``FolderUpload.finish`` send it after everything else.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.lock import LOCK_NAME
from common.object_lock import READERS
from common.run_dir import KEPT_ORDER, is_visible
from common.storage import details_under, filesystem, is_remote


def _lock_object(rel: str) -> bool:
    """A folder's lock or a reader's lease (common/object_lock.py): who uses the folder, not its data."""
    parts = rel.split("/")
    return parts[-1] == LOCK_NAME or READERS in parts[:-1]


def _objects_under(fs: Any, key: str) -> dict[str, dict]:
    """The data objects under `key` with the listing's details (one listing; not the folder's lock or readers'
    leases), sorted by name."""
    return {name: info for name, info in details_under(fs, key).items() if not _lock_object(name[len(key) + 1 :])}


def _local_targets(key: str, found: Iterable[str], local: Path) -> list[Path]:
    """The local twins in `local` of the objects `found` under `key` (same relative names), their folders made."""
    targets = [local / name[len(key) + 1 :] for name in found]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    return targets


def _fetch(fs: Any, key: str, found: list[str], local: Path) -> list[str]:
    """The objects `found` under `key` into `local` (same relative names), fetched together; those names."""
    targets = _local_targets(key, found, local)
    fs.get(found, [str(t) for t in targets])  # s3fs fetches them concurrently: one GET each, no look-up first
    return [name[len(key) + 1 :] for name in found]


def download_folder(url: str, local: Path) -> list[str]:
    """Every object under `url` into `local` (same relative names); their names. A missing or empty prefix
    is a FileNotFoundError naming the URL."""
    fs, key = filesystem(url)
    key = key.rstrip("/")
    found = list(_objects_under(fs, key))
    if not found:
        raise FileNotFoundError(f"{url}: no such folder on the store (nothing under it)")
    return _fetch(fs, key, found, local)


def download_kept_documents(run_dir: str, local: Path) -> str | None:
    """The run's kept documents copied into `local/<folder>`: ``deduped/`` when it holds parquet, else
    ``curated/`` (``common.run_dir.kept_documents_dir``); the folder's name, None when neither holds any."""
    fetch = fetch_kept_documents(run_dir, local)
    if fetch is None:
        return None
    with contextlib.closing(fetch):
        fetch.wait_all()
    return fetch.folder.name


def fetch_kept_documents(run_dir: str, local: Path) -> FolderFetch | None:
    """``download_kept_documents`` begun: the folder chosen and its objects on their way in the background
    (``FolderFetch``); None when neither folder holds parquet.

    One listing per folder looked at, then the objects' GETs: the folder test, its recursive glob, a HEAD per
    parquet file and the download's own listing were three round trips and a HEAD per file more, one after
    another, a fixed cost of every chain step that reads the documents (``bench.object_store``)."""
    fs, key = filesystem(run_dir)
    for name in KEPT_ORDER:
        folder = f"{key.rstrip('/')}/{name}"
        found = _objects_under(fs, folder)
        if any(n.endswith(".parquet") and is_visible(Path(n)) for n in found):
            return FolderFetch(fs, folder, found, local / name)
    return None


FETCH_THREADS = 4  # objects of a ``FolderFetch`` on their way at once


class FolderFetch:
    """A store folder's objects (from one listing) copied into a local folder in the background, in name
    order, ``threads`` at a time, so that a reader can start on the first files while the others come
    (``wait``): the mixture build tokenizes each parquet file as soon as it is there, where it waited for the
    whole folder (``bench.object_store_mixture --latency-ms 30``: 5-6 % of the store build; with moto on the
    build's own cores the GETs' CPU only moves into the tokenizing). One GET an object, as before."""

    def __init__(self, fs: Any, key: str, found: dict[str, dict], local: Path, threads: int = FETCH_THREADS) -> None:
        self.folder = local
        names = sorted(found)
        targets = _local_targets(key, names, local)
        self.details = {target: found[name] for name, target in zip(names, targets, strict=True)}
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="folder-fetch")
        self._on_way = {
            target: self._pool.submit(fs.get_file, name, str(target))
            for name, target in zip(names, targets, strict=True)
        }

    def wait(self, path: Path) -> None:
        """Return once `path` (one of the folder's local copies) is whole; the copy's error if it failed."""
        future = self._on_way.get(Path(path))
        if future is not None:
            future.result()

    def wait_all(self) -> None:
        for future in self._on_way.values():
            future.result()

    def landed(self) -> bool:
        """Whether every copy is whole (none still on its way, none failed)."""
        return all(f.done() and not f.cancelled() and f.exception() is None for f in self._on_way.values())

    def close(self) -> None:
        """Stop: the copies not begun are dropped, those under way finish (a file is not left being written)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


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


FETCH_AHEAD = 4  # store files a reader's ``FetchAhead`` holds in the scratch or has on the way


class FetchAhead:
    """Store files copied into the scratch (``tempfile``) in the order a reader will ask for them, up to
    ``ahead`` at a time before it: each file comes down by one GET while the reader works on the one before,
    where opening each in turn waited for a HEAD (its size and ETag), then a GET for its footer and another
    for its data (the report, ``bench.object_store --latency-ms``). The reader deletes a copy once read
    (``take`` hands it over), so the scratch holds at most ``ahead`` files; a file not in the order, or never
    asked for, leaves the reader opening the store's file itself."""

    def __init__(self, paths: list[Any], ahead: int = FETCH_AHEAD) -> None:
        self._order = [str(p) for p in paths]
        self._next, self._ahead = 0, ahead
        self._on_way: dict[str, Future] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="fetch-"))
        self._pool = ThreadPoolExecutor(ahead, thread_name_prefix="fetch")
        self._fill()

    def _get(self, index: int, url: str) -> Path:
        fs, key = filesystem(url)
        local = self._dir / f"{index:06d}"
        fs.get_file(key, str(local))
        return local

    def _fill(self) -> None:
        while self._next < len(self._order) and len(self._on_way) < self._ahead:
            url = self._order[self._next]
            if url not in self._on_way:  # a file listed twice comes down once
                self._on_way[url] = self._pool.submit(self._get, self._next, url)
            self._next += 1

    def take(self, path: Any) -> Path | None:
        """The local copy of ``path`` (the caller deletes it), None when it is not on its way."""
        future = self._on_way.pop(str(path), None)
        if future is None:
            return None
        try:
            return future.result()
        finally:
            self._fill()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def fetch_ahead(paths: list[Any], ahead: int = FETCH_AHEAD) -> Iterator[FetchAhead | None]:
    """A ``FetchAhead`` of ``paths`` when they are on a store, None for local files; its copies removed after."""
    if not paths or not is_remote(paths[0]):
        yield None
        return
    ahead_files = FetchAhead(paths, ahead)
    try:
        yield ahead_files
    finally:
        ahead_files.close()


def upload_files(files: dict[str, Path], url: str) -> None:
    """Each local file to `url/<relative name>`: one PUT (or completed multipart upload) each, so a reader
    sees a file whole or not at all."""
    if not files:
        return
    fs, key = filesystem(url)
    names = sorted(files)
    fs.put([str(files[n]) for n in names], [f"{key.rstrip('/')}/{n}" for n in names])


def _folder_files(local: Path) -> dict[str, Path]:
    """The files of `local` by relative name, not the local folder's lock (it guards that folder, not the data)."""
    return {p.relative_to(local).as_posix(): p for p in sorted(local.rglob("*")) if p.is_file() and p.name != LOCK_NAME}


def _upload_marker_last(files: dict[str, Path], url: str, last: str | None) -> None:
    """`files` to `url` (see ``upload_files``), the one named `last` (a completion marker) after all the others."""
    marker = files.pop(last, None) if last is not None else None
    upload_files(files, url)
    if marker is not None:
        upload_files({last: marker}, url)  # type: ignore[dict-item]


def upload_folder(local: Path, url: str, last: str | None = None) -> None:
    """Every file of `local` to `url`, `last` (a completion marker) after all the others."""
    _upload_marker_last(_folder_files(local), url, last)


UPLOAD_THREADS = 8


class FolderUpload:
    """A local folder sent to `url` while it is still being written: each file handed to ``send`` once complete
    goes up at once (one PUT each, on at most ``threads`` threads), so the uploads overlap the rest of the
    writing instead of starting after it (``upload_folder``); ``finish`` sends the marker last.

    Measured on ``bench.object_store``'s mixture step: a build's shards went up only once the last one was
    written, then the manifest. A block left by an error waits for the uploads already running, cancels the
    queued ones and never sends the marker, so a reader finds no marker naming a file that is not there."""

    def __init__(self, local: Path, url: str, threads: int = UPLOAD_THREADS) -> None:
        self.local, self.url = local, url
        self._fs, key = filesystem(url)
        self._key = key.rstrip("/")
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="folder-upload")
        self._sent: dict[str, Future] = {}
        self._lock = threading.Lock()  # ``send`` is called from the threads that write the files

    def send(self, names: Iterable[str]) -> None:
        """Upload `local/<name>` (complete, not written again) to `url/<name>` for each name, in the background."""
        for name in names:
            future = self._pool.submit(self._fs.put_file, str(self.local / name), f"{self._key}/{name}")
            with self._lock:
                self._sent[name] = future

    def finish(self, last: str | None = None) -> None:
        """Wait for every upload (the first failure raised), send the folder's files not sent yet, then `last`."""
        with self._lock:
            pending = list(self._sent.values())
        errors = [err for err in (future.exception() for future in pending) if err is not None]
        if errors:
            raise errors[0]
        rest = {name: path for name, path in _folder_files(self.local).items() if name not in self._sent}
        _upload_marker_last(rest, self.url, last)

    def __enter__(self) -> FolderUpload:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
