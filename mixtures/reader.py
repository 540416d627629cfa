"""Memory-mapped access to the shards a manifest lists, so the trainer can cut windows without copies."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mixtures.manifest import Manifest, read_manifest


class ShardReader:
    """Read-only view over a shard directory: per-file token arrays and document boundaries.

    Files are memory-mapped lazily (numpy memmap), so opening a reader over terabytes costs nothing
    and each data-loader worker only pages in the windows it reads.
    """

    def __init__(self, shard_dir: str | os.PathLike[str], verify: bool = True) -> None:
        self.root = Path(shard_dir)
        self.manifest: Manifest = read_manifest(self.root, verify=verify)
        self._tokens: dict[int, np.memmap] = {}
        self._ends: dict[int, np.memmap] = {}

    def __len__(self) -> int:
        return len(self.manifest.files)

    @property
    def total_tokens(self) -> int:
        return self.manifest.total_tokens

    def path(self, file_idx: int) -> Path:
        """Absolute path of the `file_idx`-th .ds file."""
        return self.root / self.manifest.files[file_idx].path

    def tokens(self, file_idx: int) -> np.ndarray:
        """All tokens of one .ds file as a read-only memmap (dtype from the manifest)."""
        if file_idx not in self._tokens:
            shard = self.manifest.files[file_idx]
            self._tokens[file_idx] = _memmap(self.path(file_idx), self.manifest.numpy_dtype, shard.tokens)
        return self._tokens[file_idx]

    def doc_ends(self, file_idx: int) -> np.ndarray:
        """Cumulative document end positions (in tokens) of one file, from its .ds.index."""
        if file_idx not in self._ends:
            shard = self.manifest.files[file_idx]
            index = self.path(file_idx).with_name(self.path(file_idx).name + ".index")
            self._ends[file_idx] = _memmap(index, np.dtype("<u8"), shard.documents)
        return self._ends[file_idx]

    def document(self, file_idx: int, doc_idx: int) -> np.ndarray:
        """Tokens of one document (its trailing EOS included)."""
        ends = self.doc_ends(file_idx)
        start = int(ends[doc_idx - 1]) if doc_idx > 0 else 0
        return self.tokens(file_idx)[start : int(ends[doc_idx])]

    def window(self, file_idx: int, start: int, length: int) -> np.ndarray:
        """`length` tokens of one file starting at `start` (shorter only at the end of the file)."""
        return self.tokens(file_idx)[start : start + length]

    def windows(self, wanted: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """`window(file, start, length)` of each request: a batch's windows at once (a reader of a store
        fetches what they need together)."""
        return [self.window(*request) for request in wanted]

    def prefetch(self, wanted: list[tuple[int, int, int]]) -> None:
        """Start reading these windows ahead (a reader of a store; a memory map pages them in when read)."""

    def close(self) -> None:
        """Stop what reads ahead (a reader of a store); the memory maps close with the reader."""

    def fetch_summary(self) -> str | None:
        """What the reader fetched from a store (None: a local reader fetches nothing)."""
        return None

    def num_windows(self, file_idx: int, length: int) -> int:
        """How many non-overlapping windows of `length` tokens one file holds (datatrove uses seq_len+1)."""
        return self.manifest.files[file_idx].tokens // length


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """Read-only memmap of `count` items; numpy cannot map an empty file, so return an empty array."""
    if count == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))
