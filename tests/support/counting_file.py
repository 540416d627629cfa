"""A local file whose reads are counted: which bytes of a file a check reads (a test of the parquet bomb
check, and its bench), through the file API the reader under test uses."""

from __future__ import annotations

import io
from pathlib import Path


class CountingFile(io.RawIOBase):
    """`path` opened for binary reading; `read_bytes` is what was read of it so far."""

    def __init__(self, path: Path) -> None:
        self.inner, self.read_bytes = path.open("rb"), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = self.inner.readinto(buffer) or 0
        self.read_bytes += n
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()
