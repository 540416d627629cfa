"""External sort of (key, node) records in bounded memory.

Records are buffered up to ``buffer_records``; a full buffer is sorted and spilled as a run file.
Runs are merged with a block-wise vectorised k-way merge: from each run's current block, emit
every record whose key is <= the smallest last-key among the blocks (nothing still on disk can
be smaller), sort that slab in numpy, refill emptied blocks. Memory stays at about
``buffer_records`` records whatever the corpus size; above ``max_fanin`` runs, merging is
done in several passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
from datatrove.io import DataFolder

from dedup.records import CorruptFileError, Header, RecordWriter, open_records

KEYED = np.dtype([("key", "<u8"), ("node", "<u8")])
RUN_KIND = b"RUNS"


def sort_by_key(records: np.ndarray) -> np.ndarray:
    return records[np.argsort(records["key"], kind="stable")]


def check_sorted(block: np.ndarray, previous_last: int | None, where: str) -> None:
    """Raise naming ``where`` when a block is out of order (datatrove's "Hash order error")."""
    keys = block["key"]
    if not len(keys):
        return
    if (previous_last is not None and keys[0] < previous_last) or bool(np.any(keys[1:] < keys[:-1])):
        raise CorruptFileError(f"{where}: records are not sorted by key; the file is corrupt, delete it")


def merge_sorted(sources: list[Iterator[np.ndarray]]) -> Iterator[np.ndarray]:
    """Merge iterators of sorted blocks into one non-decreasing stream of blocks."""
    heads: list[np.ndarray | None] = [_next_nonempty(s) for s in sources]
    live = [i for i, h in enumerate(heads) if h is not None]
    while live:
        threshold = min(int(heads[i]["key"][-1]) for i in live)  # type: ignore[index]
        parts = []
        for i in live:
            head = heads[i]
            assert head is not None
            cut = int(np.searchsorted(head["key"], np.uint64(threshold), side="right"))
            if cut:
                parts.append(head[:cut])
                heads[i] = head[cut:] if cut < len(head) else _next_nonempty(sources[i])
        yield parts[0] if len(parts) == 1 else sort_by_key(np.concatenate(parts))
        live = [i for i in live if heads[i] is not None]


def _next_nonempty(source: Iterator[np.ndarray]) -> np.ndarray | None:
    for block in source:
        if len(block):
            return block
    return None


class ExternalSorter:
    """Collect (key, node) records, then iterate them sorted by key; runs live under ``run_dir``."""

    def __init__(
        self, folder: DataFolder, run_dir: str, fingerprint: int, buffer_records: int, max_fanin: int = 64
    ) -> None:
        self.folder = folder
        self.run_dir = run_dir
        self.fingerprint = fingerprint
        self.buffer_records = max(2, buffer_records)
        self.max_fanin = max(2, max_fanin)
        self._buffer = np.empty(self.buffer_records, dtype=KEYED)
        self._filled = 0
        self._runs: list[str] = []
        self._run_counter = 0
        self.clear_runs()

    def clear_runs(self) -> None:
        """Remove runs left by an interrupted attempt."""
        if self.folder.exists(self.run_dir):
            self.folder.rm(self.run_dir, recursive=True)

    def add(self, keys: np.ndarray, nodes: np.ndarray) -> None:
        start = 0
        while start < len(keys):
            take = min(len(keys) - start, self.buffer_records - self._filled)
            dst = self._buffer[self._filled : self._filled + take]
            dst["key"] = keys[start : start + take]
            dst["node"] = nodes[start : start + take]
            self._filled += take
            start += take
            if self._filled == self.buffer_records:
                self._spill()

    def _spill(self) -> None:
        self._runs.append(self._write_run([sort_by_key(self._buffer[: self._filled])]))
        self._filled = 0

    def _write_run(self, blocks: Iterator[np.ndarray] | list[np.ndarray]) -> str:
        path = f"{self.run_dir}/{self._run_counter:06d}.run"
        self._run_counter += 1
        writer = RecordWriter(self.folder, path, Header(RUN_KIND, self.fingerprint, 0, 1, KEYED.itemsize))
        try:
            for block in blocks:
                writer.write(block)
        except BaseException:
            writer.abort()
            raise
        writer.commit()
        return path

    def _read_run(self, path: str, block_records: int) -> Iterator[np.ndarray]:
        run = open_records(self.folder, path, RUN_KIND, self.fingerprint, KEYED)
        last: int | None = None
        for block in run.blocks(block_records):
            check_sorted(block, last, run.where)
            last = int(block["key"][-1]) if len(block) else last
            yield block

    def sorted_blocks(self) -> Iterator[np.ndarray]:
        """All records, in non-decreasing key order, as a stream of blocks."""
        if not self._runs:
            yield sort_by_key(self._buffer[: self._filled])
            return
        if self._filled:
            self._spill()
        self._buffer = np.empty(0, dtype=KEYED)  # merge buffers take its place
        runs = self._runs
        while len(runs) > self.max_fanin:
            merged = []
            for i in range(0, len(runs), self.max_fanin):
                group = runs[i : i + self.max_fanin]
                merged.append(self._write_run(self._merge(group)))
                for path in group:
                    self.folder.rm(path)
            runs = merged
        yield from self._merge(runs)

    def _merge(self, runs: list[str]) -> Iterator[np.ndarray]:
        block = max(1024, self.buffer_records // len(runs))
        return merge_sorted([self._read_run(p, block) for p in runs])

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.clear_runs()
