"""Cross-dump dedup: a persisted MinHash index per dump, and matching a new dump against earlier ones.

Why: FineWeb dedups each dump on its own (global dedup hurt), but a user adding a new dump to a
corpus built from earlier ones wants the new dump's copies of old pages gone (datatrove issues
#110, #370, #376). The index is made from the band keys the signature stage already wrote, so an
earlier dump's signatures are never recomputed, and is written once per dump:

    minhash/index/band_XX.keys   sorted distinct band keys of every document, without the dump salt
    minhash/index/index.json     the dump, document count and config fingerprint

Band keys carry the dump's salt (``fmix64(key ^ salt)``, so dumps never match inside one run);
``fmix64`` is a bijection, so the index stores ``fmix64^-1(key) ^ salt``, the key every dump
shares. Matching a new dump (``CrossDumpMatches``, one task per band) removes the salt of its own
keys the same way and looks them up; a document with any band in an earlier index is a candidate,
exactly as two documents sharing a band are inside a dump (no Jaccard check, as in FineWeb's LSH).
``CrossDumpClusters`` turns the matches into cluster files the dedup filter reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash
from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder, DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger

from common.atomic import atomic_write_text
from common.documents import DOCUMENT_GLOB
from common.storage import is_remote, join
from dedup.buckets import band_signature_files
from dedup.clusters import CLUSTER_TABLE, DedupClusters
from dedup.config import DedupConfig
from dedup.formats import node_ids
from dedup.minhash import fmix64_inverse
from dedup.records import CorruptFileError, Header, RecordWriter, is_valid, open_records

INDEX_KIND = b"INDX"
MATCH_KIND = b"XMAT"
KEY = np.dtype([("key", "<u8")])
NODE = np.dtype([("node", "<u8")])
INDEX_META = "index.json"


def index_path(band: int) -> str:
    return f"band_{band:02d}.keys"


def matches_path(band: int) -> str:
    return f"band_{band:02d}.matches"


# run_group_salt's answers in this process, by the documents' listing (names, sizes, versions): each band's
# task asks it of the same files, and a task process runs several bands (on a store, reading the column was
# a look-up and two ranged reads per file and per band)
_SALTS: dict[tuple, tuple[int | None, str | None]] = {}


def run_group_salt(input_folder: DataFolderLike, group_by: str | None) -> tuple[int | None, str | None]:
    """(salt, group value) of a run's documents: one group (dump) per run, or no grouping (None, None)."""
    if group_by is None:
        return None, None
    folder = get_datafolder(input_folder)
    listed = folder.glob(DOCUMENT_GLOB, detail=True)  # what datatrove's list_files asks, with the details
    files = sorted(
        (name, info.get("size"), str(info.get("ETag") or info.get("mtime") or info.get("LastModified")))
        for name, info in listed.items()
        if info["type"] != "directory"
    )
    key = (folder.resolve_paths(""), group_by, tuple(files))
    if key not in _SALTS:
        _SALTS[key] = _group_salt(folder, [name for name, _, _ in files], group_by)
    return _SALTS[key]


def _group_salt(folder: DataFolder, names: list[str], group_by: str) -> tuple[int | None, str | None]:
    values: set = set()
    for name in names:
        with folder.open(name, "rb") as f:
            table = pq.read_table(f, columns=[group_by]) if group_by in pq.read_schema(f).names else None
        values |= set(pc.unique(table[group_by]).to_pylist()) if table is not None else {None}
    if len(values) > 1:
        shown = ", ".join(sorted(map(str, values))[:3])
        raise ValueError(f"{folder.path}: cross-dump dedup needs one {group_by} per run, found {len(values)}: {shown}")
    value = next(iter(values), None)
    return (0 if value is None else xxhash.xxh64_intdigest(str(value))), value


def unsalted(keys: np.ndarray, salt: int | None) -> np.ndarray:
    """Band keys as every dump computes them (the salt ``band_keys`` mixed in, taken out)."""
    return keys if salt is None else fmix64_inverse(keys) ^ np.uint64(salt)


def band_task_done(
    folder, path: str, kind: bytes, fingerprint: int, dtype: np.dtype, band: int, world_size: int, bands: int
) -> bool:
    """Check a one-task-per-band stage's task count; True when its output already validates (skip)."""
    if world_size != bands:
        raise ValueError(f"{path}: this stage runs one task per band: {bands} tasks, got {world_size}")
    if is_valid(folder, path, kind, fingerprint, dtype, rank=band, world_size=bands):
        logger.info(f"{path} already complete, skipping")
        return True
    return False


class BandIndex:
    """Writes this dump's index band by band (``band_XX.keys``, and ``index.json`` with band 0): the bucket stage
    (``DedupBuckets``) hands it each band's keys from the signature read it sorts anyway."""

    def __init__(
        self,
        input_folder: DataFolderLike,
        index_folder: DataFolderLike,
        config: DedupConfig,
        group_salt: tuple[int | None, str | None] | None = None,
    ) -> None:
        """``group_salt``: ``run_group_salt`` of ``input_folder``, when the caller asked it once for every band (each
        task asks it else: on a store a listing of the documents per band, and a read of their group column
        per task process)."""
        self.input_folder = input_folder
        self.folder = get_datafolder(index_folder)
        self.config = config
        self.fingerprint = config.fingerprint("minhash")
        self.group_salt = group_salt

    def done(self, band: int) -> bool:
        """The band's keys validate (and, for band 0, ``index.json`` is there: it is written after them)."""
        bands = self.config.num_buckets
        path = index_path(band)
        if not is_valid(self.folder, path, INDEX_KIND, self.fingerprint, KEY, rank=band, world_size=bands):
            return False
        return band != 0 or self.folder.exists(INDEX_META)

    def missing(self, bands: list[int]) -> list[int]:
        """Which of ``bands`` have no keys file (band 0: or no ``index.json``), from one listing of the index."""
        try:
            present = set(self.folder.find("", maxdepth=1))
        except FileNotFoundError:
            present = set()
        return [b for b in bands if index_path(b) not in present or (b == 0 and INDEX_META not in present)]

    def write(self, band: int, keys: np.ndarray, documents: int) -> int:
        """The band's salted band ``keys`` (repeats allowed) as its sorted distinct unsalted keys; their count."""
        bands = self.config.num_buckets
        salt, group = self.group_salt or run_group_salt(self.input_folder, self.config.group_by)
        unique = np.unique(unsalted(keys, salt))
        records = np.empty(len(unique), dtype=KEY)
        records["key"] = unique
        header = Header(INDEX_KIND, self.fingerprint, band, bands, KEY.itemsize)
        with RecordWriter(self.folder, index_path(band), header) as w:
            w.write(records)
            w.commit(extra=documents)
        if band == 0:
            meta = {"group_by": self.config.group_by, "group": group, "documents": documents, "bands": bands}
            meta["fingerprint"] = f"{self.fingerprint:#x}"
            atomic_write_text(self.folder.resolve_paths(INDEX_META), json.dumps(meta, indent=2))
        return len(unique)


def check_index(index_folder: str | Path, config: DedupConfig) -> dict:
    """An earlier dump's index, checked to be complete and made with this config; one-line errors."""
    folder = get_datafolder(str(index_folder))
    fp = config.fingerprint("minhash")
    if not folder.exists(INDEX_META):
        raise CorruptFileError(f"{folder.path}: no dedup index (run dedup on that dump with --write-index)")
    for band in range(config.num_buckets):
        open_records(folder, index_path(band), INDEX_KIND, fp, KEY, rank=band, world_size=config.num_buckets)
    with folder.open(INDEX_META, "rt") as f:
        return json.load(f)


def earlier_indexes(run_dirs: Iterable[str | Path], config: DedupConfig) -> tuple[str, ...]:
    """Earlier dumps' run directories -> their index folders (``RUN/minhash/index``), each checked with
    ``check_index``; a bad one is a ``CorruptFileError`` naming its run directory."""
    indexes = []
    for run_dir in run_dirs:
        # a bucket URL stays a URL (datatrove's DataFolder reads it); a local path is made absolute
        index = join(run_dir if is_remote(run_dir) else Path(run_dir).resolve(), "minhash", "index")
        try:
            check_index(index, config)
        except CorruptFileError as err:
            raise CorruptFileError(f"{run_dir}: {err}") from None
        indexes.append(str(index))
    return tuple(indexes)


class CrossDumpMatches(PipelineStep):
    """Per band: this dump's documents whose key is in an earlier dump's index -> ``band_XX.matches``."""

    type = "🫂 - DEDUP"
    name = "🎯 cross-dump matches"

    def __init__(
        self,
        input_folder: DataFolderLike,
        signatures_folder: DataFolderLike,
        output_folder: DataFolderLike,
        config: DedupConfig,
    ) -> None:
        super().__init__()
        if not config.dedup_against:
            raise ValueError("cross-dump matching needs at least one earlier index (dedup_against)")
        self.input_folder = input_folder
        self.signatures_folder = get_datafolder(signatures_folder)
        self.output_folder = get_datafolder(output_folder)
        self.config = config
        self.fingerprint = config.fingerprint("cross_dump")

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        band, bands, path = rank, self.config.num_buckets, matches_path(rank)
        if band_task_done(self.output_folder, path, MATCH_KIND, self.fingerprint, NODE, band, world_size, bands):
            return
        files = band_signature_files(self.signatures_folder, band, self.config.fingerprint("minhash"))
        salt, _ = run_group_salt(self.input_folder, self.config.group_by)
        earlier = []
        for index in self.config.dedup_against:
            folder = get_datafolder(index)
            fp = self.config.fingerprint("minhash")
            keys = open_records(folder, index_path(band), INDEX_KIND, fp, KEY, rank=band, world_size=bands)
            earlier.append(keys.read_all()["key"])  # reading the index, never the earlier dump's documents
            self.stat_update("index_keys", value=len(earlier[-1]))
        header = Header(MATCH_KIND, self.fingerprint, band, bands, NODE.itemsize)
        with RecordWriter(self.output_folder, path, header) as writer, self.track_time("lookup"):
            for f in files:
                sig = f.read_all()
                keys = unsalted(sig["key"], salt)
                hit = np.zeros(len(keys), dtype=bool)
                for index_keys in earlier:
                    hit |= np.isin(keys, index_keys)
                records = np.empty(int(hit.sum()), dtype=NODE)
                records["node"] = node_ids(f.header.rank, sig["doc"][hit])
                writer.write(records)
                self.stat_update("matches", value=len(records))
            writer.commit(extra=len(earlier))


class CrossDumpClusters(DedupClusters):
    """Every matched document, as a removed one-document "cluster" per rank (``keep = 0``)."""

    name = "🎯 cross-dump clusters"

    def __init__(self, matches_folder: DataFolderLike, signatures_folder: DataFolderLike, output_folder, config):
        super().__init__(matches_folder, signatures_folder, output_folder, config, kind="cross_dump")
        self.signature_fingerprint = config.fingerprint("minhash")

    def clustered_nodes(self) -> np.ndarray:
        bands = self.config.num_buckets
        parts = [
            open_records(self.pairs_folder, matches_path(b), MATCH_KIND, self.fingerprint, NODE, b, bands).read_all()
            for b in range(bands)
        ]
        nodes = np.unique(np.concatenate([p["node"] for p in parts])) if parts else np.empty(0, np.uint64)
        table = np.empty(len(nodes), dtype=CLUSTER_TABLE)
        table["node"], table["size"], table["cluster"], table["keep"] = nodes, 1, -1, 0
        return table
