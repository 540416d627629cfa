"""Stage 2: per band, sort every task's keys on disk and write the candidate pairs.

One task per band. The band's signature files are checked as a set (same config, same task
count, no rank missing, no stale extra file) before anything is read; keys are sorted with the
external sorter (bounded memory, runs on disk) and equal keys become star edges. When the run directory
is in an object store, the sort runs go to the node's local scratch (``tempfile``, which ``--scratch``
points at): they are temporary, read back at once, and a store would bill every block read.
"""

from __future__ import annotations

import posixpath
import re
import struct
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

import numpy as np
import xxhash
from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder, DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger

from common.storage import details_under
from dedup.config import DedupConfig
from dedup.extsort import ExternalSorter, spill_space
from dedup.formats import SIG_KIND, SIGNATURE, node_ids, pairs_path, runs_dir
from dedup.keys import n_bands
from dedup.pairs import PAIR, PAIR_KIND, StarEdges
from dedup.records import (
    CorruptFileError,
    Header,
    RecordFile,
    RecordWriter,
    keep_ahead,
    listed_version,
    open_records,
)


class BandKeys(Protocol):
    """Where a bucket task hands its band's keys besides the pairs: this dump's index (``dedup.index.BandIndex``)."""

    def done(self, band: int) -> bool:
        """The band's part is there and validates (its task may be skipped)."""
        ...

    def write(self, band: int, keys: np.ndarray, documents: int) -> int:
        """The band's salted keys (repeats allowed) and its document count; the keys it wrote."""
        ...

    def missing(self, bands: list[int]) -> list[int]:
        """Which of ``bands`` have no part written (by one look at the folder, not a validation)."""
        ...


_SIG_NAME = re.compile(r"(\d{5})\.sig")
LISTING_PAGE = 1000  # keys an S3 listing answers in one response


def listed_ahead(folder: DataFolder) -> dict[str, dict] | None:
    """Every file below ``folder`` with its listing's details (size, ETag), by name relative to it, from one
    listing, for one stage's band tasks to share: each asks its own band of it (a request each else, 14 a stage).
    None on a local disk (a look-up there is no request) and above one listing page (every task would carry it)."""
    if folder.is_local():
        return None
    root = folder.path.rstrip("/")
    found = details_under(folder.fs, root)
    return {name[len(root) + 1 :]: info for name, info in found.items()} if len(found) <= LISTING_PAGE else None


def band_signature_files(
    folder: DataFolder, band: int, fingerprint: int, listed: dict[str, dict] | None = None
) -> list[RecordFile]:
    """The band's signature files, validated as a complete set from one run of the signature stage.
    ``listed``: the whole signature folder's listing (``folder.find("", detail=True)``) when the caller has it
    (a reader of every band: one listing, not one per band)."""
    sub = f"band_{band:02d}"
    # one listing, which also gives each file's size (a glob, an existence check first, and a size look-up
    # per file are several requests each on an object store)
    if listed is None:
        listed = folder.find(sub, maxdepth=1, detail=True)
    else:
        listed = {name: info for name, info in listed.items() if posixpath.dirname(name) == sub}
    names = sorted(name for name in listed if name.endswith(".sig"))
    if not names:
        raise CorruptFileError(f"{folder.resolve_paths(sub)}: no signature files (run the signatures first)")
    files = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if not _SIG_NAME.fullmatch(base):
            raise CorruptFileError(f"{folder.resolve_paths(name)}: unexpected file in a signature folder")
        try:
            size, version = listed[name]["size"], listed_version(listed[name])
            files.append(
                open_records(
                    folder, name, SIG_KIND, fingerprint, SIGNATURE, rank=int(base[:5]), size=size, version=version
                )
            )
        except CorruptFileError as err:
            raise CorruptFileError(
                f"{err}. To recompute it, delete it and the completion marker of signature task {base[:5]}"
            ) from err
    world = files[0].header.world_size
    for f in files:
        if f.header.world_size != world:
            raise CorruptFileError(
                f"{f.where}: written by a run with {f.header.world_size} tasks, "
                f"{files[0].where} by one with {world}; delete stale signature files"
            )
    ranks = {f.header.rank for f in files}
    missing = sorted(set(range(world)) - ranks)
    if missing:
        raise CorruptFileError(
            f"{folder.resolve_paths(sub)}/{missing[0]:05d}.sig: missing "
            f"({len(missing)} of the {world} ranks have no file)"
        )
    return sorted(files, key=lambda f: f.header.rank)


def signature_digest(files: list[RecordFile]) -> int:
    """Identity of a band's signature files (rank, count, checksum): stored with the pairs made
    from them, so pairs left from before a signature task was recomputed are caught."""
    digest = xxhash.xxh64()
    for f in files:
        digest.update(struct.pack("<IQQ", f.header.rank, f.n_records, f.checksum))
    return digest.intdigest()


def band_pairs(
    pairs_folder: DataFolder,
    signatures_folder: DataFolder,
    band: int,
    bands: int,
    fingerprint: int,
    size: int | None = None,
    version: str | None = None,
    signatures: dict[str, dict] | None = None,
) -> RecordFile:
    """The band's pairs file, checked to come from the signature files now on disk; ``size`` and ``version``:
    its size and ETag from the caller's listing (else looked up: one request on a store); ``signatures``: the
    signature folder's listing, when the caller has it (``band_signature_files``)."""
    path = pairs_path(band)
    pairs = open_records(
        pairs_folder, path, PAIR_KIND, fingerprint, PAIR, rank=band, world_size=bands, size=size, version=version
    )
    if pairs.extra != signature_digest(band_signature_files(signatures_folder, band, fingerprint, signatures)):
        raise CorruptFileError(
            f"{pairs.where}: made from other signature files than those on disk (a signature task ran "
            "again after the buckets); delete it and its completion marker to recompute"
        )
    return pairs


class DedupBuckets(PipelineStep):
    """Sorted buckets of one band -> ``<output>/band_XX.pairs`` (run with one task per band); with ``index``
    (MinHash's, ``write_index``) also the band's part of this dump's index, from the same read and sort of its
    signatures (a stage of its own read, listed and wrote them again: on a store ~8 requests a band)."""

    type = "🫂 - DEDUP"
    name = "🎯 buckets"

    def __init__(
        self,
        signatures_folder: DataFolderLike,
        output_folder: DataFolderLike,
        config: DedupConfig | None = None,
        kind: str = "minhash",
        index: BandKeys | None = None,
    ):
        super().__init__()
        self.index = index
        self.signatures_listed: dict[str, dict] | None = None  # list_ahead's
        self.outputs_listed: dict[str, dict] | None = None
        self.signatures_folder = get_datafolder(signatures_folder)
        self.output_folder = get_datafolder(output_folder)
        self.config = config or DedupConfig()
        self.kind = kind
        self.fingerprint = self.config.fingerprint(kind)

    def list_ahead(self, keep: bool = False) -> DedupBuckets:
        """The signature folder and the output folder listed once, by the driver just before the stage, for its
        tasks (``listed_ahead``): a task finds its band's files and whether its pairs are there without a
        request. The listings stay true for the stage: the signatures ran, the run lock keeps any other writer
        out, and each task writes only its own band. ``keep``: the stage's tasks are forked from this process
        (the local executor), which also reads the small signature files now, side by side (``keep_ahead``), for
        them to inherit, and for the cluster task it runs after them."""
        self.signatures_listed = listed_ahead(self.signatures_folder)
        self.outputs_listed = listed_ahead(self.output_folder)
        if keep and self.signatures_listed is not None:
            keep_ahead(self.signatures_folder, self.signatures_listed)
        return self

    def bands_without_index(self) -> list[int]:
        """Bands whose pairs a finished earlier run left, but not their index part: a run directory from a version
        whose index was a stage of its own, stopped between the two. The executor skips such a band's task by its
        completion marker, so the driver drops the marker (``dedup.star.drop_completions``) and the task writes
        both. On a store no request for a fresh stage (no pairs listed ahead), one listing else."""
        if self.index is None:
            return []
        bands = range(n_bands(self.config, self.kind))
        if self.outputs_listed is not None:
            with_pairs = [band for band in bands if pairs_path(band) in self.outputs_listed]
        else:
            with_pairs = [band for band in bands if self.output_folder.exists(pairs_path(band))]
        return self.index.missing(with_pairs) if with_pairs else []

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        bands = n_bands(self.config, self.kind)
        if world_size != bands:
            raise ValueError(f"the bucket stage needs one task per band: {bands} tasks, got {world_size}")
        band = rank
        out = pairs_path(band)
        files = band_signature_files(self.signatures_folder, band, self.fingerprint, self.signatures_listed)
        source = signature_digest(files)
        if self._pairs_done(out, band, bands, source) and (self.index is None or self.index.done(band)):
            logger.info(f"{out} already complete, skipping")
            return
        buffer = self.config.sort_buffer_records
        block = max(1024, buffer // 4)
        header = Header(PAIR_KIND, self.fingerprint, band, bands, PAIR.itemsize)
        with spill_space(self.output_folder) as space:
            sorter = ExternalSorter(space, runs_dir(band), self.fingerprint, buffer)
            try:
                with self.track_time("sort"):
                    for f in files:
                        for records in f.blocks(block):
                            sorter.add(records["key"], node_ids(f.header.rank, records["doc"]))
                            self.stat_update("keys", value=len(records))
                with RecordWriter(self.output_folder, out, header) as writer, self.track_time("pairs"):
                    edges = StarEdges(distinct_keys=self.index is not None)
                    for sorted_block in sorter.sorted_blocks():
                        pairs = edges.feed(sorted_block)
                        writer.write(pairs)
                        self.stat_update("pairs", value=len(pairs))
                    beside = self._index_beside(band, edges, files) if writer.direct else None
                    try:
                        writer.commit(extra=source)
                    finally:
                        if beside is not None:  # no thread of the task left running, whatever happened
                            wait([beside])
            finally:
                sorter.close()
        if self.index is not None and edges.keys is not None:  # the task's marker after both
            with self.track_time("index"):  # on a store written beside the pairs (timed with them)
                written = beside.result() if beside is not None else self._write_index(band, edges, files)
                self.stat_update("index_keys", value=written)

    def _write_index(self, band: int, edges: StarEdges, files: list[RecordFile]) -> int:
        keys = np.concatenate(edges.keys) if edges.keys else np.empty(0, np.uint64)
        return self.index.write(band, keys, sum(f.extra for f in files))

    def _index_beside(self, band: int, edges: StarEdges, files: list[RecordFile]) -> Future | None:
        """On a store, the band's index part written (``BandIndex.write``) on a thread of its own while the
        pairs upload: two uploads sent together, not one round trip after the other (the order between them is
        free: a band is done only when both validate, and its completion marker comes after both)."""
        if self.index is None or edges.keys is None:
            return None
        thread = ThreadPoolExecutor(1, thread_name_prefix="band-index")
        try:
            return thread.submit(self._write_index, band, edges, files)
        finally:
            thread.shutdown(wait=False)

    def _pairs_done(self, out: str, band: int, bands: int, source: int) -> bool:
        """The band's pairs validate and come from these signature files."""
        entry = None if self.outputs_listed is None else self.outputs_listed.get(out)
        if self.outputs_listed is not None and entry is None:
            return False  # not listed: not there
        size, version = (entry["size"], listed_version(entry)) if entry else (None, None)
        try:
            pairs = open_records(self.output_folder, out, PAIR_KIND, self.fingerprint, PAIR, band, bands, size, version)
        except CorruptFileError:
            return False
        return pairs.extra == source
