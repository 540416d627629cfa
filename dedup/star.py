"""Distributed clustering of the duplicate pairs: large-star / small-star passes over partitioned edge files.

The single-task union-find (``dedup/clusters.py``) holds every clustered document in one process
(~110 bytes per pair): fine for a crawl's slice, not for a whole dump. Here every pass is a stage of
``tasks`` datatrove tasks; a task reads only the edges routed to it, sorts them on disk
(``ExternalSorter``, its buffer sized from the memory cap) and streams them group by group, so its
memory is the sort buffer whatever the corpus size.

Passes (Kiveris et al. 2014, "Connected Components in MapReduce and Beyond"), edges keyed by node:

* **route**: every band's pairs, each edge in both directions, to the task ``fmix64(node) % tasks``.
* **large-star** (odd passes): for node ``u`` with neighbours ``N``, ``m = min(N + u)``; every
  neighbour ``v > u`` is linked to ``m`` instead. Edges are keyed by their larger end for the next pass.
* **small-star** (even passes): for ``u`` with smaller neighbours ``N``, ``m = min N``; ``u`` and every
  ``v`` in ``N`` are linked to ``m``. Edges go out in both directions for the next large-star.

Each task counts its changes (large-star: an edge rewired; small-star: a smaller neighbour beyond the
first). When a large-star and the small-star after it change nothing, every component is a star around
its smallest node, which is the union-find's root and the kept document. Then:

* **sizes**: (root, member) edges re-routed by input rank range, with each range's number of roots;
* **number**: cluster ids = roots before this range + position in it (the union-find's numbering,
  clusters in the order of their kept documents), sizes; records go to their document's range;
* **write**: sorted by node, the ``<rank>.clusters`` files the filter reads, unchanged in format, one
  open at a time;
* **summary** (one task, the stage named like the single task's): ``summary.json``, the same fields, and the
  same counters (``pairs``: the duplicate pairs read, from the route tasks' receipts; clusters; to remove).

Every file is a checksummed record file written atomically; each task writes a ``.json`` receipt last,
after all of its files, and a task with a receipt is skipped (the next pass validates the files as it reads them),
so a killed run resumes pass by pass: a task killed before its receipt runs again and rewrites every file it
writes, under the same names, so nothing is lost or counted twice. A receipt records the size of each of its
task's files: before a stage runs, the driver lists the stage before's files, and a task finished in an earlier run
whose file was cut short or lost since (a disk fault, an object truncated on the store) is run again, its receipt
and completion marker dropped (``repaired``); when its own inputs are gone, the next stage stops on the file, with
its one-line error. On an object store the run folder holds only
the committed files (each uploaded whole from local scratch, the receipt one PUT after them); the sort runs and
the files being written stay on the node's disk (``extsort.spill_space``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import posixpath
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder, DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger

from common.atomic import atomic_write_text
from common.cli import CPUS, MAX_TASK_MB, integer
from common.storage import filesystem
from dedup.buckets import band_pairs
from dedup.clusters import CLUSTER_TABLE, SUMMARY, DedupClusters, cluster_summary, docs_per_rank
from dedup.config import DedupConfig
from dedup.extsort import KEYED, ExternalSorter, spill_space
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path, node_doc, node_rank, pairs_path
from dedup.keys import n_bands
from dedup.minhash import fmix64
from dedup.pairs import PAIR, PAIR_KIND
from dedup.records import (
    CorruptFileError,
    Header,
    RecordFile,
    RecordWriter,
    is_valid,
    listed_version,
    open_records,
    streams_to_final_key,
)

EDGE_KIND = b"EDGE"
LABEL_KIND = b"LABL"
WORK = "work"
BY_PAIR = ("key", "node")
MAX_PASSES = 200
T, R = TypeVar("T"), TypeVar("R")

# Memory model of one pass task (measured with bench.dedup_cluster_scale, see dedup/README.md):
# the interpreter with numpy + datatrove, plus ~80 bytes per record of sort buffer (the buffer, its
# lexsort permutation and the sorted copy, the pass's temporaries; 48 let a 10M-document task reach 266 MB
# under a 256 MB cap).
TASK_BASE_MB = 120
BYTES_PER_BUFFERED_RECORD = 80
MIN_BUFFER_RECORDS = 1 << 14
# Single-task union-find: ~110 bytes per pair on top of the interpreter (200 MB at 1.27M pairs).
UNION_FIND_BYTES_PER_PAIR = 110
UNION_FIND_BASE_MB = 70


@dataclass(frozen=True)
class ClusterPlan:
    """Pre-flight figures for the cluster stage: which path runs and what each task needs."""

    mode: str  # "single" or "distributed"
    tasks: int
    memory_mb_per_task: float
    disk_mb_per_task: float
    buffer_records: int
    pairs: int

    def describe(self) -> str:
        return (
            f"clusters: {self.mode}, {self.tasks} task(s) per pass, {self.pairs:,} pairs, "
            f"<= {self.memory_mb_per_task:,.0f} MB memory and ~{self.disk_mb_per_task:,.0f} MB disk per task"
        )


def union_find_mb(pairs: int) -> float:
    return UNION_FIND_BASE_MB + pairs * UNION_FIND_BYTES_PER_PAIR / 2**20


def buffer_records_for(memory_mb: float) -> int:
    """Sort buffer (records) that keeps a pass task under ``memory_mb``; ValueError when none fits."""
    records = int((memory_mb - TASK_BASE_MB) * 2**20 / BYTES_PER_BUFFERED_RECORD)
    if records < MIN_BUFFER_RECORDS:
        need = TASK_BASE_MB + MIN_BUFFER_RECORDS * BYTES_PER_BUFFERED_RECORD / 2**20
        raise ValueError(f"cluster memory cap {memory_mb:g} MB is below the {need:.0f} MB a cluster task needs")
    return records


def add_cluster_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--cluster-tasks`` and ``--cluster-memory-mb``: every CLI that runs the dedup stages."""
    parser.add_argument(
        "--cluster-tasks",
        type=CPUS,
        default=None,
        help="tasks per clustering pass (default: one union-find task while it fits --cluster-memory-mb, else "
        "large-star/small-star passes); 1 = always the single task",
    )
    parser.add_argument(
        "--cluster-memory-mb", type=integer(1, MAX_TASK_MB), default=4096, help="memory cap of each clustering task"
    )


def cluster_settings(args: argparse.Namespace) -> dict[str, int | None]:
    """The parsed ``add_cluster_arguments`` as ``DedupConfig`` fields, checked (a one-line ``ValueError``)."""
    if args.cluster_tasks is not None and args.cluster_tasks < 1:
        raise ValueError(f"--cluster-tasks must be >= 1, got {args.cluster_tasks}")
    buffer_records_for(args.cluster_memory_mb)
    return {"cluster_tasks": args.cluster_tasks, "cluster_memory_mb": args.cluster_memory_mb}


def plan_clusters(pairs: int, config: DedupConfig) -> ClusterPlan:
    """Single task when its union-find fits the memory cap (or ``cluster_tasks == 1``), else distributed
    with ``cluster_tasks`` tasks (auto: one per 8M pairs, at least 2). Disk: a pass reads and writes
    every edge in both directions (2 x 16 bytes), spread over the tasks, two passes kept on disk."""
    cap = config.cluster_memory_mb
    buffer = buffer_records_for(cap)
    tasks = config.cluster_tasks
    if tasks == 1 or (tasks is None and union_find_mb(pairs) <= cap):
        return ClusterPlan("single", 1, union_find_mb(pairs), pairs * 16 / 2**20, 0, pairs)
    tasks = tasks or max(2, math.ceil(pairs / 8_000_000))
    per_task_records = 2 * pairs / tasks
    memory = TASK_BASE_MB + min(buffer, per_task_records) * BYTES_PER_BUFFERED_RECORD / 2**20
    disk = 3 * per_task_records * KEYED.itemsize / 2**20  # input, sorted runs, output
    return ClusterPlan("distributed", tasks, memory, disk, buffer, pairs)


def count_pairs(pairs_folder: DataFolderLike, config: DedupConfig, kind: str) -> int | None:
    """Pairs in the band files (their footers), None when they are not all there yet."""
    folder, fp, bands = get_datafolder(pairs_folder), config.fingerprint(kind), n_bands(config, kind)
    listed = folder.find("", maxdepth=1, detail=True)  # every band's size in one listing
    if any(pairs_path(band) not in listed for band in range(bands)):
        return None

    def pairs_of(band: int) -> int | None:
        path = pairs_path(band)
        try:
            entry = listed[path]
            found = open_records(
                folder, path, PAIR_KIND, fp, PAIR, band, bands, entry["size"], listed_version(entry)
            )  # kept in this process: the single cluster task, run here next, reads them without a GET
        except CorruptFileError:
            return None
        return found.n_records

    # a GET each on a store: sent together (one after another: 14 round trips before the stage starts)
    counts = side_by_side(folder, pairs_of, list(range(bands)))
    return None if None in counts else sum(counts)


def side_by_side(folder: DataFolder, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """``fn`` over ``items``: one after another on a local disk, side by side on a store (a round trip each)."""
    if folder.is_local() or len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(len(items), 16), thread_name_prefix="store") as pool:
        return list(pool.map(fn, items))


def hash_part(nodes: np.ndarray, tasks: int) -> np.ndarray:
    return (fmix64(nodes.astype(np.uint64)) % np.uint64(tasks)).astype(np.int64)


def range_part(nodes: np.ndarray, world: int, tasks: int) -> np.ndarray:
    """Task of a node by its input rank: ranges of ranks, so range order is node order."""
    return node_rank(nodes) * tasks // world


def rank_range(part: int, world: int, tasks: int) -> range:
    """The input ranks whose nodes ``range_part`` sends to ``part``."""
    return range(-(-part * world // tasks), -(-(part + 1) * world // tasks))


class RoutedWriter:
    """One record file per destination task (``<dir>/<dst>/<src>.<ext>``) plus a receipt ``<dir>/<src>.json``.

    On an object store the files are written to local scratch and uploaded one by one at ``commit`` (each object
    whole once it appears): streamed to the store, every open file would buffer a 50 MB part, ``tasks`` of them
    at once, beyond the task's memory cap."""

    def __init__(
        self, folder: DataFolder, directory: str, src: int, tasks: int, fp: int, kind: bytes, dtype: np.dtype
    ) -> None:
        self.folder, self.directory, self.src, self.tasks = folder, directory, src, tasks
        ext = "edges" if kind == EDGE_KIND else "labels"
        self._scratch = contextlib.ExitStack()
        self.staged = self._scratch.enter_context(spill_space(folder))
        self.writers: list[RecordWriter] = []
        with self._scratch.pop_all() as failing:  # the scratch removed if a file cannot be opened
            for dst in range(tasks):
                header = Header(kind, fp, src, tasks, dtype.itemsize)
                self.writers.append(RecordWriter(self.staged, f"{directory}/{dst:05d}/{src:05d}.{ext}", header))
            self._scratch = failing.pop_all()
        self.records = 0

    def write(self, records: np.ndarray, dests: np.ndarray) -> None:
        if not len(records):
            return
        order = np.argsort(dests, kind="stable")
        bounds = np.searchsorted(dests[order], np.arange(self.tasks + 1))
        for dst in range(self.tasks):
            if bounds[dst + 1] > bounds[dst]:
                self.writers[dst].write(records[order[bounds[dst] : bounds[dst + 1]]])
        self.records += len(records)

    def commit(self, receipt: dict) -> None:
        """Every file, then the receipt: a task killed in between has no receipt and runs again whole."""
        with self._scratch:
            for w in self.writers:
                w.commit()
                if self.staged is not self.folder:  # now, in order: the receipt must come after every file
                    fs, key = filesystem(self.folder.resolve_paths(w.path))
                    fs.put_file(self.staged.resolve_paths(w.path), key)
            files = {w.path: w.size for w in self.writers}  # what the next stage checks before it reads them
            receipt = {**receipt, "records": self.records, "files": files}
            write_receipt(self.folder, receipt_path(self.directory, self.src), receipt)

    def abort(self) -> None:
        with self._scratch:
            for w in self.writers:
                w.abort()

    def __enter__(self) -> RoutedWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:  # a failing task leaves no file of its own behind
            self.abort()


def receipt_path(directory: str, src: int) -> str:
    return f"{directory}/{src:05d}.json"


def write_receipt(folder: DataFolder, path: str, receipt: dict) -> None:
    """A task's receipt, written after its files and seen whole or not at all: on a local disk ``.tmp`` and a
    rename, on an object store one PUT (its "rename" is a copy, a delete and four look-ups)."""
    if streams_to_final_key(folder):
        atomic_write_text(folder.resolve_paths(path), json.dumps(receipt))
        return
    with folder.open(path + ".tmp", "wt") as f:
        json.dump(receipt, f)
    folder.mv(path + ".tmp", path)


def read_receipt(folder: DataFolder, directory: str, src: int) -> dict:
    """One GET on a store (a look-up, then an open, were two or three requests)."""
    path = receipt_path(directory, src)
    try:
        return json.loads(folder.cat_file(path, **getattr(folder.fs, "small_read_options", {})))
    except FileNotFoundError:
        raise CorruptFileError(f"{folder.resolve_paths(path)}: missing (did a cluster task fail?)") from None


def read_receipts(folder: DataFolder, directory: str, tasks: int | list[int]) -> list[dict]:
    """The receipts of tasks ``range(tasks)`` (or of those listed), side by side on a store."""
    srcs = range(tasks) if isinstance(tasks, int) else tasks
    return side_by_side(folder, lambda src: read_receipt(folder, directory, src), list(srcs))


def listed(folder: DataFolder, directory: str) -> set[str]:
    """What is in ``directory`` (its files and folders, not further down); empty when it is not there. One listing
    on a store (two when nothing is there; ``find`` with a depth took three)."""
    try:
        return set(folder.ls(directory, detail=False))
    except FileNotFoundError:
        return set()


def finished(folder: DataFolder, directory: str, tasks: int) -> set[int]:
    """The tasks of a stage with a receipt."""
    found = listed(folder, directory)
    return {src for src in range(tasks) if receipt_path(directory, src) in found}


def incoming(
    folder: DataFolder, directory: str, dst: int, tasks: int, fp: int, kind: bytes, dtype: np.dtype
) -> list[RecordFile]:
    """The files every task of the previous pass routed to ``dst``, validated as a complete set."""
    ext = "edges" if kind == EDGE_KIND else "labels"
    return [
        open_records(folder, f"{directory}/{dst:05d}/{src:05d}.{ext}", kind, fp, dtype, rank=src, world_size=tasks)
        for src in range(tasks)
    ]


def pass_dir(index: int) -> str:
    return f"{WORK}/pass_{index:03d}"


class _Groups:
    """Walks (key, node) records sorted by the pair across blocks: drops repeated records and gives each
    record its group's first (smallest) node and whether it starts its group."""

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.first = 0

    def feed(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key, node = block["key"], block["node"]
        keep = np.ones(len(block), dtype=bool)
        keep[1:] = (key[1:] != key[:-1]) | (node[1:] != node[:-1])
        if self.last is not None and len(block):
            keep[0] = (int(key[0]), int(node[0])) != self.last
        block = block[keep]
        key, node = block["key"], block["node"]
        n = len(block)
        if not n:
            return block, np.zeros(0, dtype=bool), np.zeros(0, dtype=np.uint64)
        starts = np.empty(n, dtype=bool)
        starts[0] = self.last is None or int(key[0]) != self.last[0]
        np.not_equal(key[1:], key[:-1], out=starts[1:])
        idx = np.where(starts, np.arange(n), -1)
        np.maximum.accumulate(idx, out=idx)
        first = np.where(idx >= 0, node[np.maximum(idx, 0)], np.uint64(self.first))
        self.last, self.first = (int(key[-1]), int(node[-1])), int(first[-1])
        return block, starts, first


def _edges(keys: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    out = np.empty(len(keys), dtype=KEYED)
    out["key"], out["node"] = keys, nodes
    return out


class _ClusterTask(PipelineStep):
    """What every cluster pass shares: folders, fingerprint, task count, sort buffer, skip when done."""

    type = "🫂 - DEDUP"

    def __init__(
        self,
        pairs_folder: DataFolderLike,
        signatures_folder: DataFolderLike,
        output_folder: DataFolderLike,
        config: DedupConfig,
        kind: str,
        tasks: int,
    ) -> None:
        super().__init__()
        self.pairs_folder = get_datafolder(pairs_folder)
        self.signatures_folder = get_datafolder(signatures_folder)
        self.output_folder = get_datafolder(output_folder)
        self.config, self.kind, self.tasks = config, kind, tasks
        self.fingerprint = config.fingerprint(kind)
        self.buffer_records = buffer_records_for(config.cluster_memory_mb)

    directory = ""
    # the files this stage reads (the previous stage's directory, their kind and records); None: the band pairs
    source: tuple[str, bytes, np.dtype] | None = None

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        if world_size != self.tasks:
            raise ValueError(f"{self.name}: planned for {self.tasks} tasks, got {world_size}")
        if self.output_folder.exists(receipt_path(self.directory, rank)):
            logger.info(f"{self.directory} task {rank} already complete, skipping")
            return
        self.process(rank)

    def process(self, rank: int) -> None:
        raise NotImplementedError

    def writer(self, rank: int, kind: bytes = EDGE_KIND, dtype: np.dtype = KEYED) -> RoutedWriter:
        return RoutedWriter(self.output_folder, self.directory, rank, self.tasks, self.fingerprint, kind, dtype)

    def inputs(self, rank: int) -> list[RecordFile]:
        """Task ``rank``'s input files, validated (header, footer, size): a ``CorruptFileError`` names the first
        one missing or cut short."""
        assert self.source is not None
        directory, kind, dtype = self.source
        return incoming(self.output_folder, directory, rank, self.tasks, self.fingerprint, kind, dtype)

    def sorted_input(self, rank: int, order: tuple = BY_PAIR) -> Iterator[np.ndarray]:
        files = self.inputs(rank)
        assert self.source is not None
        dtype = self.source[2]
        with spill_space(self.output_folder) as space:
            sorter = ExternalSorter(
                space, f"{self.directory}/{rank:05d}.runs", self.fingerprint, self.buffer_records, dtype=dtype,
                order=order,
            )  # fmt: skip
            try:
                block = max(1024, self.buffer_records // 4)
                with self.track_time("sort"):
                    for f in files:
                        for records in f.blocks(block):
                            sorter.add_records(records)
                chunk = max(1024, self.buffer_records // 8)  # the passes' numpy temporaries scale with the block
                for sorted_block in sorter.sorted_blocks():
                    for start in range(0, len(sorted_block), chunk):
                        yield sorted_block[start : start + chunk]
            finally:
                sorter.close()

    def docs_per_rank(self) -> list[int]:
        return docs_per_rank(self.signatures_folder, self.fingerprint)


class ClusterRoute(_ClusterTask):
    """Pass 0: the bands' pairs (task ``r`` reads bands ``r, r + tasks, ...``), both directions, by node hash."""

    name = "🎯 clusters: route"
    directory = pass_dir(0)

    def inputs(self, rank: int) -> list[RecordFile]:
        bands = n_bands(self.config, self.kind)
        return [
            band_pairs(self.pairs_folder, self.signatures_folder, band, bands, self.fingerprint)
            for band in range(rank, bands, self.tasks)
        ]

    def process(self, rank: int) -> None:
        pairs = 0
        with self.writer(rank) as out:
            for band_file in self.inputs(rank):
                for block in band_file.blocks(max(1024, self.buffer_records // 4)):
                    both = np.concatenate([_edges(block["a"], block["b"]), _edges(block["b"], block["a"])])
                    out.write(both, hash_part(both["key"], self.tasks))
                    self.stat_update("pairs", value=len(block))
                    pairs += len(block)
            out.commit({"changes": -1, "pairs": pairs})  # the summary's count of duplicate pairs read


class StarPass(_ClusterTask):
    """Pass ``index`` >= 1: large-star when odd, small-star when even (see the module docstring)."""

    def __init__(self, *args: object, index: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.index = index
        self.large = index % 2 == 1
        self.directory = pass_dir(index)
        self.source = (pass_dir(index - 1), EDGE_KIND, KEYED)
        self.name = f"🎯 clusters: {'large' if self.large else 'small'}-star {index}"

    def process(self, rank: int) -> None:
        changes = 0
        groups = _Groups()
        with self.writer(rank) as out:
            for block in self.sorted_input(rank):
                block, starts, first = groups.feed(block)
                key, node = block["key"], block["node"]
                if self.large:  # neighbours above u go to m = min(u, smallest neighbour)
                    m = np.minimum(key, first)
                    up = node > key
                    changes += int(np.count_nonzero(up & (m != key)))
                    edges = _edges(node[up], m[up])  # keyed by the larger end, for small-star
                    out.write(edges, hash_part(edges["key"], self.tasks))
                else:  # u and its other smaller neighbours go to m, the smallest
                    changes += int(np.count_nonzero(~starts))
                    x = np.where(starts, key, node)
                    edges = np.concatenate([_edges(x, first), _edges(first, x)])
                    out.write(edges, hash_part(edges["key"], self.tasks))
            self.stat_update("changes", value=changes)
            out.commit({"changes": changes})


class ClusterSizes(_ClusterTask):
    """(root, member) edges of the converged stars, re-routed to the range task of their root, and how many
    roots each range task gets (the offsets of the cluster ids)."""

    name = "🎯 clusters: sizes"
    directory = f"{WORK}/roots"

    def __init__(self, *args: object, last_pass: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.last_pass = last_pass
        self.source = (pass_dir(last_pass), EDGE_KIND, KEYED)

    def process(self, rank: int) -> None:
        world = len(self.docs_per_rank())
        roots = np.zeros(self.tasks, dtype=np.int64)
        groups = _Groups()
        with self.writer(rank) as out:
            for block in self.sorted_input(rank):
                block = block[block["key"] < block["node"]]
                block, starts, _ = groups.feed(block)
                dests = range_part(block["key"], world, self.tasks)
                roots += np.bincount(dests[starts], minlength=self.tasks)
                out.write(block, dests)
            out.commit({"roots": roots.tolist()})


class ClusterNumbers(_ClusterTask):
    """Cluster ids (roots of earlier ranges + position here) and sizes, sent to the document's range task."""

    name = "🎯 clusters: number"
    directory = f"{WORK}/labels"
    source = (ClusterSizes.directory, EDGE_KIND, KEYED)

    def process(self, rank: int) -> None:
        world = len(self.docs_per_rank())
        receipts = read_receipts(self.output_folder, ClusterSizes.directory, self.tasks)
        next_id = int(sum(sum(r["roots"][:rank]) for r in receipts))
        sizes: list[int] = []
        pending: list[np.ndarray] = []  # the group that may continue in the next block

        def flush(group_blocks: list[np.ndarray]) -> None:
            nonlocal next_id
            group = np.concatenate(group_blocks)
            starts = np.flatnonzero(np.r_[True, group["key"][1:] != group["key"][:-1]])
            counts = np.diff(np.r_[starts, len(group)])
            ids = next_id + np.arange(len(starts))
            next_id += len(starts)
            sizes.extend((counts + 1).tolist())
            member_ids, member_sizes = np.repeat(ids, counts), np.repeat(counts + 1, counts)
            table = np.empty(len(group) + len(starts), dtype=CLUSTER_TABLE)
            table["node"] = np.r_[group["key"][starts], group["node"]]
            table["size"] = np.r_[counts + 1, member_sizes]
            table["cluster"] = np.r_[ids, member_ids]
            table["keep"] = np.r_[np.ones(len(starts), np.uint8), np.zeros(len(group), np.uint8)]
            out.write(table, range_part(table["node"], world, self.tasks))

        with self.writer(rank, LABEL_KIND, CLUSTER_TABLE) as out:
            groups = _Groups()
            for block in self.sorted_input(rank):
                block, _, _ = groups.feed(block)
                if not len(block):
                    continue
                if pending and block["key"][0] != pending[0]["key"][0]:
                    flush(pending)
                    pending = []
                tail = int(np.searchsorted(block["key"], block["key"][-1], side="left"))
                if tail:  # every group before the block's last one is complete
                    flush([*pending, block[:tail]])
                    pending = []
                pending.append(block[tail:])
                if sum(len(p) for p in pending) > self.buffer_records:
                    raise ValueError(f"a cluster of more than {self.buffer_records:,} documents: raise the memory cap")
            if pending:
                flush(pending)
            values, counts = np.unique(np.array(sizes, dtype=np.int64), return_counts=True)
            hist = {int(s): int(c) for s, c in zip(values, counts, strict=True)}
            out.commit({"clusters": len(sizes), "in_clusters": int(sum(sizes)), "histogram": hist})


class ClusterWrite(_ClusterTask):
    """The ``<rank>.clusters`` files of this task's input ranks, sorted by document. The labels come sorted by
    node, so rank after rank: one file is open at a time and is committed when the next rank's records start
    (an open writer buffers, up to a 5 MB part on an object store, and a task of a whole dump covers hundreds
    of ranks); a task killed between two files leaves the earlier ones whole and no receipt, and its rerun
    writes every file of its ranks again."""

    name = "🎯 clusters: write"
    directory = f"{WORK}/written"
    source = (ClusterNumbers.directory, LABEL_KIND, CLUSTER_TABLE)

    def process(self, rank: int) -> None:
        counts = self.docs_per_rank()
        world = len(counts)
        ranks = rank_range(rank, world, self.tasks)
        writer: RecordWriter | None = None
        files: dict[str, int] = {}  # each committed file's size, for its receipt

        def seal(w: RecordWriter) -> None:
            w.commit(extra=counts[w.header.rank])
            files[w.path] = w.size

        def file_of(r: int) -> RecordWriter:
            """The open file of rank ``r``: the files of the ranks before it committed (empty when no record)."""
            nonlocal writer
            if r not in ranks or (writer is not None and r < writer.header.rank):
                raise CorruptFileError(f"labels of rank {r} out of order in cluster write task {rank} ({ranks})")
            while writer is None or writer.header.rank < r:
                if writer is not None:
                    seal(writer)
                nxt = ranks.start if writer is None else writer.header.rank + 1
                header = Header(CLUSTER_KIND, self.fingerprint, nxt, world, CLUSTER.itemsize)
                writer = RecordWriter(self.output_folder, clusters_path(nxt), header)
            return writer

        try:
            for block in self.sorted_input(rank, ("node",)):
                if not len(block):
                    continue
                doc_rank = node_rank(block["node"])
                starts = np.flatnonzero(np.r_[True, doc_rank[1:] != doc_rank[:-1]])
                for start, stop in zip(starts, np.r_[starts[1:], len(block)], strict=True):
                    part = block[start:stop]
                    records = np.empty(len(part), dtype=CLUSTER)
                    records["doc"] = node_doc(part["node"])
                    for field in ("size", "cluster", "keep"):
                        records[field] = part[field]
                    file_of(int(doc_rank[start])).write(records)
            if ranks:
                seal(file_of(ranks.stop - 1))
            receipt = {"ranks": [ranks.start, ranks.stop], "files": files}
            write_receipt(self.output_folder, receipt_path(self.directory, rank), receipt)
        except BaseException:
            if writer is not None and not writer.committed:
                writer.abort()
            raise


class ClusterSummary(DedupClusters):
    """One task: ``summary.json`` from the number tasks' receipts, the cluster files checked; the work
    folder is removed."""

    name = "🎯 clusters: summary"

    def __init__(self, *args: object, tasks: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tasks = tasks

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        counts = docs_per_rank(self.signatures_folder, self.signature_fingerprint)
        if self.complete(counts):
            logger.info("clusters already complete, skipping")
            return
        receipts = read_receipts(self.output_folder, ClusterNumbers.directory, self.tasks)
        # the single task's counter: every band's duplicate pairs read (the route tasks read each band once)
        pairs = sum(r["pairs"] for r in read_receipts(self.output_folder, ClusterRoute.directory, self.tasks))
        for r in range(len(counts)):
            open_records(self.output_folder, clusters_path(r), CLUSTER_KIND, self.fingerprint, CLUSTER, r, len(counts))
        hist: dict[int, int] = {}
        for receipt in receipts:
            for size, n in receipt["histogram"].items():
                hist[int(size)] = hist.get(int(size), 0) + n
        summary = cluster_summary(self.kind, sum(counts), sum(r["in_clusters"] for r in receipts), hist)
        self.stat_update("pairs", value=pairs)
        self.write_summary(summary)
        if self.output_folder.exists(WORK):
            self.output_folder.rm(WORK, recursive=True)

    def complete(self, counts: list[int]) -> bool:
        world = len(counts)
        fp = self.fingerprint
        files_ok = all(
            is_valid(self.output_folder, clusters_path(r), CLUSTER_KIND, fp, CLUSTER, rank=r, world_size=world)
            for r in range(world)
        )
        return files_ok and self.output_folder.exists(SUMMARY)


def converged(output_folder: DataFolder, index: int, tasks: int) -> bool:
    """After small-star pass ``index``: did it and the large-star before it change nothing?"""
    return all(
        sum(r["changes"] for r in read_receipts(output_folder, pass_dir(i), tasks)) == 0 for i in (index - 1, index)
    )


Stage = tuple[str, list[PipelineStep], int]
Rerun = Callable[[str, int], None]


def drop_completions(logging_dir_of: Callable[[str], DataFolderLike]) -> Rerun:
    """``cluster_stages``' ``rerun`` for a driver whose stage ``name`` logs under ``logging_dir_of(name)``: drops
    the task's datatrove completion marker, so that the executor runs the task when the stage runs again."""

    def drop(stage: str, rank: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            get_datafolder(logging_dir_of(stage)).rm_file(f"completions/{rank:05d}")

    return drop


def damaged_tasks(folder: DataFolder, directory: str, srcs: set[int]) -> dict[int, list[tuple[str, str]]]:
    """Which of tasks ``srcs`` of a finished stage have committed files cut short or gone since their receipt was
    written (a disk fault, an object truncated on the store), or their receipt gone, each with those files (their
    paths in ``folder``) and what is wrong: a listing of the stage's folder and their receipts, which record each
    file's size (the readers still check every file whole)."""
    listed = folder.find(directory, detail=True)  # the receipts and the routed files
    found = {src: [(receipt_path(directory, src), "missing")] for src in srcs}
    present = sorted(src for src in srcs if receipt_path(directory, src) in listed)
    files: dict[str, tuple[int, int]] = {}
    for src, receipt in zip(present, read_receipts(folder, directory, present), strict=True):
        del found[src]
        files.update({path: (src, size) for path, size in receipt.get("files", {}).items()})
    for elsewhere in {posixpath.dirname(path) for path in files if not path.startswith(directory + "/")}:
        listed |= folder.find(elsewhere, maxdepth=1, detail=True)  # the write stage's cluster files, at the top
    for path, (src, size) in files.items():
        now = listed.get(path, {}).get("size")
        if now != size:
            what = "missing" if now is None else f"{now} bytes, its receipt says {size}"
            found.setdefault(src, []).append((path, what))
    return {src: [(path, f"{folder.resolve_paths(path)}: {what}") for path, what in bad] for src, bad in found.items()}


def reader(path: str, directory: str) -> int | None:
    """The task of the next stage that reads ``path``, a file of stage ``directory``: the destination it was routed
    to; None for a receipt or the write stage's cluster files (the summary reads them all)."""
    if not path.startswith(directory + "/") or path.count("/") == directory.count("/") + 1:
        return None
    return int(path[len(directory) + 1 :].split("/")[0])


@dataclass
class _Ran:
    """A stage the driver yielded, and which of its tasks had finished before (in an earlier run)."""

    stage: Stage
    finished_before: set[int]


def repaired(folder: DataFolder, written: _Ran, current: _Ran | None, rerun: Rerun | None) -> Iterator[Stage]:
    """Before the next stage (``current``; None: the summary) runs, unless it is done: the tasks of the stage before
    (``written``) that had finished in an earlier run (those that ran now wrote their files just now) and whose files
    were cut short or lost since their receipts are run again: their receipts and completion markers dropped, the
    stage yielded again. Without ``rerun`` nothing is yielded: the next stage stops on the file. When such a task's
    own inputs are gone too, a ``CorruptFileError`` names the damaged file and the missing input, here in the
    driver, before the next stage is sent to any executor (its tasks would fail on the file, and a Ray or Slurm
    stage's error names only its tasks) — unless every task of the next stage that reads that file has finished."""
    done = set() if current is None else current.finished_before
    if rerun is None or not written.finished_before or (current is not None and len(done) == current.stage[2]):
        return
    name, (step,), _ = written.stage
    assert isinstance(step, _ClusterTask)
    damaged = damaged_tasks(folder, step.directory, written.finished_before)
    for src, problems in list(damaged.items()):
        try:
            step.inputs(src)
        except CorruptFileError as gone:
            needed = [problem for path, problem in problems if reader(path, step.directory) not in done]
            if needed:
                raise CorruptFileError(f"{needed[0]}; {name} task {src} cannot run again: {gone}") from None
            logger.warning(f"{problems[0][1]}; {name} task {src} cannot run again, its readers have finished: {gone}")
            del damaged[src]
    for src, problems in damaged.items():
        logger.warning(f"{problems[0][1]}: {name} task {src} runs again")
        with contextlib.suppress(FileNotFoundError):  # gone already when that is what was wrong
            folder.rm_file(receipt_path(step.directory, src))
        rerun(name, src)
    if damaged:
        yield written.stage  # once: a file damaged again is left to the next stage's error


def cluster_stages(
    prefix: str,
    pairs_folder: str,
    signatures_folder: str,
    output_folder: str,
    config: DedupConfig,
    kind: str,
    rerun: Rerun | None = None,
) -> Iterator[Stage]:
    """The cluster stage(s), yielded one by one: each pass is decided after the one before has run.
    The single task when ``plan_clusters`` says so (also when the pairs are not written yet).
    ``rerun(stage, rank)``: drops a task's completion marker (``drop_completions``), so that a task whose file was
    damaged after it finished is run again (``repaired``); without it, the next stage stops on that file."""
    args = (pairs_folder, signatures_folder, output_folder, config, kind)
    pairs = count_pairs(pairs_folder, config, kind)
    plan = plan_clusters(pairs or 0, config)
    if pairs is None or plan.mode == "single":
        yield f"{prefix}_clusters", [DedupClusters(*args)], 1
        return
    logger.info(plan.describe())
    tasks, out = plan.tasks, get_datafolder(output_folder)
    summary = ClusterSummary(*args, tasks=tasks)
    if summary.complete(docs_per_rank(summary.signatures_folder, summary.signature_fingerprint)):
        yield f"{prefix}_clusters", [summary], 1
        return

    earlier = listed(out, WORK) if rerun is not None else set()  # the stages' folders an earlier run left

    def ran(stage: Stage) -> _Ran:
        """``stage``, with its tasks that finished in an earlier run (looked up only when it matters)."""
        step = stage[1][0]
        assert isinstance(step, _ClusterTask)
        return _Ran(stage, finished(out, step.directory, tasks) if step.directory in earlier else set())

    written = ran((f"{prefix}_clusters_route", [ClusterRoute(*args, tasks)], tasks))
    yield written.stage
    index = 1
    while True:
        current = ran((f"{prefix}_clusters_pass_{index:03d}", [StarPass(*args, tasks, index=index)], tasks))
        yield from repaired(out, written, current, rerun)
        yield current.stage
        if index >= 3 and out.exists(pass_dir(index - 2)):  # its receipts stay; its edges are read no more
            for dst in range(tasks):
                if out.exists(f"{pass_dir(index - 2)}/{dst:05d}"):
                    out.rm(f"{pass_dir(index - 2)}/{dst:05d}", recursive=True)
        written = current
        if index % 2 == 0 and converged(out, index, tasks):
            break
        index += 1
        if index > MAX_PASSES:
            raise RuntimeError(f"{output_folder}: clusters did not converge in {MAX_PASSES} passes")
    for name, step in (
        ("sizes", ClusterSizes(*args, tasks, last_pass=index)),
        ("number", ClusterNumbers(*args, tasks)),
        ("write", ClusterWrite(*args, tasks)),
    ):
        current = ran((f"{prefix}_clusters_{name}", [step], tasks))
        yield from repaired(out, written, current, rerun)
        yield current.stage
        written = current
    yield from repaired(out, written, None, rerun)  # the summary is not done (else it was yielded alone)
    yield f"{prefix}_clusters", [summary], 1
