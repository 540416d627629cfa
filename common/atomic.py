"""Atomic file writes: a reader (the trainer, a resumed run, the report) never sees half a file.

The one temp-file-fsync-rename implementation of the project; every room writes through it. Object stores
have no rename, but an object becomes visible only when its upload completes (one PUT, or a completed
multipart upload): for a URL the content is written to a local temp file (under the run's scratch) and
uploaded to the final key once complete, so a killed writer leaves no partial object (in the background
where the caller waits for it before its completion marker: ``common.uploads``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from common.storage import filesystem, is_remote, scratch_name
from common.uploads import upload_later


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()
FILE_MODE = 0o666 & ~_UMASK  # what open() creates; mkstemp and some libraries (safetensors) make 0600
_TWINS: tuple[str, ...] = ()  # local folders whose files are copies on their way to a store (``store_twins``)
_TWINS_LOCK = threading.Lock()


@contextlib.contextmanager
def store_twins(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, files written atomically under the local `folder` skip the fsync (still renamed
    whole): they are the local twins of a store's objects (a store build's staging), uploaded and then
    removed, whose durable copy is the store's; syncing them only delayed their uploads."""
    global _TWINS
    entry = os.path.join(os.path.abspath(folder), "")
    with _TWINS_LOCK:
        _TWINS = (*_TWINS, entry)
    try:
        yield
    finally:
        with _TWINS_LOCK:  # only this block's entry: another thread's build may have added its own meanwhile
            twins = list(_TWINS)
            twins.remove(entry)
            _TWINS = tuple(twins)


def _durable(target: Path) -> bool:
    return not _TWINS or not os.path.abspath(target).startswith(_TWINS)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temp file next to `path` for binary writing; rename it onto `path` only on success.

    For a URL: a local temp file, uploaded to `path` only on success."""
    if is_remote(path):
        with _upload_on_success(str(path)) as handle:
            yield handle
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; shards are read by other users' trainers
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            if _durable(target):
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _upload_on_success(url: str) -> Iterator[BinaryIO]:
    """The content goes to a local temp file, uploaded once complete: now, or in the background inside
    ``common.uploads.background_uploads`` (whose end waits for it)."""
    fs, key = filesystem(url)
    fd, local = tempfile.mkstemp(prefix=f".{scratch_name(key)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
    except BaseException:
        os.unlink(local)
        raise
    upload_later(fs, local, key)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (temp file + fsync + rename; for a URL one PUT of the whole content)."""
    if is_remote(path):
        fs, key = filesystem(path)
        fs.pipe_file(key, data)
        return
    with atomic_open(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 `text` to `path` atomically (``run.json``, ``stats.json``, the report, manifests)."""
    atomic_write_bytes(path, text.encode("utf-8"))
