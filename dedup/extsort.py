"""External sort of fixed-size records (by default (key, node)) in bounded memory.

Records are buffered up to ``buffer_records``; a full buffer is sorted and spilled as a run file.
Runs are merged with a block-wise vectorised k-way merge: from each run's current block, emit
every record whose key is <= the smallest last-key among the blocks (nothing still on disk can
be smaller), sort that slab in numpy, refill emptied blocks. Memory stays at about
``buffer_records`` records whatever the corpus size; above ``max_fanin`` runs, merging is
done in several passes. ``order`` names the sort fields: ``("key",)`` (stable, the buckets' order)
or two fields, compared as a pair (the cluster passes need each group's smallest node first).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np
from datatrove.io import DataFolder, get_datafolder

from common.storage import is_remote
from dedup.records import CorruptFileError, Header, RecordWriter, open_records

KEYED = np.dtype([("key", "<u8"), ("node", "<u8")])
RUN_KIND = b"RUNS"


Order = tuple[str, ...]
BY_KEY: Order = ("key",)


def sort_by_key(records: np.ndarray, order: Order = BY_KEY) -> np.ndarray:
    if len(order) == 1:
        return records[np.argsort(records[order[0]], kind="stable")]
    return records[np.lexsort([records[f] for f in reversed(order)])]


def _sort_tuple(record: np.void, order: Order) -> tuple[int, ...]:
    return tuple(int(record[f]) for f in order)


def check_sorted(block: np.ndarray, previous_last: tuple[int, ...] | None, where: str, order: Order = BY_KEY) -> None:
    """Raise naming ``where`` when a block is out of order (datatrove's "Hash order error")."""
    if not len(block):
        return
    first = block[order[0]]
    bad = first[1:] < first[:-1]
    if len(order) == 2:
        second = block[order[1]]
        bad |= (first[1:] == first[:-1]) & (second[1:] < second[:-1])
    if (previous_last is not None and _sort_tuple(block[0], order) < previous_last) or bool(np.any(bad)):
        raise CorruptFileError(f"{where}: records are not sorted by {'/'.join(order)}; the file is corrupt, delete it")


def _cut(head: np.ndarray, threshold: tuple[int, ...], order: Order) -> int:
    """How many leading records of the sorted ``head`` are <= ``threshold`` in ``order``."""
    first = head[order[0]]
    if len(order) == 1:
        return int(np.searchsorted(first, np.uint64(threshold[0]), side="right"))
    lo = int(np.searchsorted(first, np.uint64(threshold[0]), side="left"))
    hi = int(np.searchsorted(first, np.uint64(threshold[0]), side="right"))
    return lo + int(np.searchsorted(head[order[1]][lo:hi], np.uint64(threshold[1]), side="right"))


def merge_sorted(sources: list[Iterator[np.ndarray]], order: Order = BY_KEY) -> Iterator[np.ndarray]:
    """Merge iterators of sorted blocks into one non-decreasing stream of blocks."""
    heads: list[np.ndarray | None] = [_next_nonempty(s) for s in sources]
    live = [i for i, h in enumerate(heads) if h is not None]
    while live:
        threshold = min(_sort_tuple(heads[i][-1], order) for i in live)  # type: ignore[index]
        parts = []
        for i in live:
            head = heads[i]
            assert head is not None
            cut = _cut(head, threshold, order)
            if cut:
                parts.append(head[:cut])
                heads[i] = head[cut:] if cut < len(head) else _next_nonempty(sources[i])
        yield parts[0] if len(parts) == 1 else sort_by_key(np.concatenate(parts), order)
        live = [i for i in live if heads[i] is not None]


@contextlib.contextmanager
def spill_space(output_folder: DataFolder) -> Iterator[DataFolder]:
    """Where a task spills what it reads back itself (sort runs, files staged before their upload): beside the
    output on a local disk, else a local temp folder (``tempfile``, which ``--scratch`` points at), removed at
    the end. A store would bill every block read, and an open object buffers a whole part (50 MB) in memory."""
    if not is_remote(output_folder.resolve_paths("")):
        yield output_folder
        return
    local = tempfile.mkdtemp(prefix="cc2model-spill-")
    try:
        yield get_datafolder(local)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _next_nonempty(source: Iterator[np.ndarray]) -> np.ndarray | None:
    for block in source:
        if len(block):
            return block
    return None


class ExternalSorter:
    """Collect records (``dtype``, (key, node) by default), then iterate them sorted by ``order``;
    runs live under ``run_dir``."""

    def __init__(
        self,
        folder: DataFolder,
        run_dir: str,
        fingerprint: int,
        buffer_records: int,
        max_fanin: int = 64,
        dtype: np.dtype = KEYED,
        order: Order = BY_KEY,
    ) -> None:
        self.folder = folder
        self.dtype = dtype
        self.order = order
        self.run_dir = run_dir
        self.fingerprint = fingerprint
        self.buffer_records = max(2, buffer_records)
        self.max_fanin = max(2, max_fanin)
        self._buffer = np.empty(self.buffer_records, dtype=dtype)
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
            self._advance(take)
            start += take

    def add_records(self, records: np.ndarray) -> None:
        start = 0
        while start < len(records):
            take = min(len(records) - start, self.buffer_records - self._filled)
            self._buffer[self._filled : self._filled + take] = records[start : start + take]
            self._advance(take)
            start += take

    def _advance(self, take: int) -> None:
        self._filled += take
        if self._filled == self.buffer_records:
            self._spill()

    def _spill(self) -> None:
        self._runs.append(self._write_run([sort_by_key(self._buffer[: self._filled], self.order)]))
        self._filled = 0

    def _write_run(self, blocks: Iterator[np.ndarray] | list[np.ndarray]) -> str:
        path = f"{self.run_dir}/{self._run_counter:06d}.run"
        self._run_counter += 1
        writer = RecordWriter(self.folder, path, Header(RUN_KIND, self.fingerprint, 0, 1, self.dtype.itemsize))
        try:
            for block in blocks:
                writer.write(block)
        except BaseException:
            writer.abort()
            raise
        writer.commit()
        return path

    def _read_run(self, path: str, block_records: int) -> Iterator[np.ndarray]:
        run = open_records(self.folder, path, RUN_KIND, self.fingerprint, self.dtype)
        last: tuple[int, ...] | None = None
        for block in run.blocks(block_records):
            check_sorted(block, last, run.where, self.order)
            last = _sort_tuple(block[-1], self.order) if len(block) else last
            yield block

    def sorted_blocks(self) -> Iterator[np.ndarray]:
        """All records, in non-decreasing key order, as a stream of blocks."""
        if not self._runs:
            yield sort_by_key(self._buffer[: self._filled], self.order)
            return
        if self._filled:
            self._spill()
        self._buffer = np.empty(0, dtype=self.dtype)  # merge buffers take its place
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
        return merge_sorted([self._read_run(p, block) for p in runs], self.order)

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.clear_runs()
