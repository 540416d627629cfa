"""Reading a user's file with bounds: only a regular file, at most so many bytes (after decompression).

A FIFO given as a source blocks a reader forever, a 3 MB gzip bomb given as an eval set decompressed to
7.7 GiB of memory, and a 100 MB recipe took 10 GiB to parse (all seen in the audit of issue 30). Config
and task files are small by nature, so every reader of one opens it here: a path that is not a regular
file is refused at once (opened non-blocking, checked with fstat, so a FIFO never blocks), and a read
past the limit raises instead of growing. The errors are OSErrors, which every reader already turns
into its one-line error naming the file.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

MAX_CONFIG_BYTES = 1 << 20  # a recipe, mixture spec, ablation spec or model YAML: the bundled ones are < 10 KB
MAX_DATA_BYTES = 512 << 20  # an eval set or task file, decompressed: BLiMP's 67 sets are 24 MB


class InputRefused(OSError):
    """A file this process will not read (not a regular file, larger than its limit); one line."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for binary reading when it is a regular file (or a link to one), else InputRefused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, without a writer
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise InputRefused(f"{path} is {kind}; only regular files are read")
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _Capped(io.RawIOBase):
    """Bytes of `inner`, raising InputRefused once more than `limit` have been read."""

    def __init__(self, inner: BinaryIO, limit: int, what: str, owned: tuple[BinaryIO, ...]) -> None:
        self.inner, self.limit, self.what, self.owned, self.total = inner, limit, what, owned, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        n = self.inner.readinto(buffer)  # type: ignore[attr-defined]
        self.total += n or 0
        if self.total > self.limit:
            raise InputRefused(f"{self.what} holds more than {self.limit:,} bytes; refused (the limit for this input)")
        return n

    def close(self) -> None:
        for handle in self.owned:
            handle.close()
        super().close()


def open_bounded(path: str | os.PathLike[str], limit: int = MAX_DATA_BYTES) -> BinaryIO:
    """A regular file for reading at most `limit` bytes, decompressed when its name ends in ``.gz``."""
    raw = open_regular(path)
    if Path(path).name.endswith(".gz"):
        inner: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        what, owned = f"{path} (decompressed)", (inner, raw)
    else:
        inner, what, owned = raw, str(path), (raw,)
    return io.BufferedReader(_Capped(inner, limit, what, owned))  # type: ignore[return-value]


def read_bounded(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The whole of a small file (`open_bounded`'s rules)."""
    with open_bounded(path, limit) as handle:
        return handle.read()
