"""Stage 3: union-find over all bands' pairs -> one cluster file per input task (single task).

Keep rule (deterministic): in each cluster the document with the smallest node id, i.e. the
first in input order (task rank, then position in the task), is kept. With one signature task
per input file (the default in ``build_dedup_stages``) this is the first occurrence in path order.
Cluster ids number clusters 0, 1, ... in the order of their kept documents; documents that are in
no cluster get size 1 and id -1 (datatrove's convention) and appear in no file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder, DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger

from common.atomic import atomic_write_text
from dedup.buckets import band_pairs
from dedup.components import connected_components
from dedup.config import DedupConfig
from dedup.formats import (
    CLUSTER,
    CLUSTER_KIND,
    SIG_KIND,
    SIGNATURE,
    clusters_path,
    node_doc,
    node_rank,
    pairs_path,
    signature_path,
)
from dedup.keys import n_bands
from dedup.pairs import PAIR
from dedup.records import Header, RecordFile, RecordWriter, is_valid, listed_version, open_records

SUMMARY = "summary.json"
READ_THREADS = 8  # bands read at once from an object store
CLUSTER_TABLE = np.dtype([("node", "<u8"), ("size", "<u4"), ("cluster", "<i8"), ("keep", "u1")])


def cluster_table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per clustered node: node, cluster size, cluster id, keep flag (sorted by node)."""
    nodes, roots = connected_components(a, b)
    reps, cluster, sizes = np.unique(roots, return_inverse=True, return_counts=True)
    table = np.empty(len(nodes), dtype=CLUSTER_TABLE)
    table["node"] = nodes
    table["size"] = sizes[cluster]
    table["cluster"] = cluster
    table["keep"] = nodes == roots
    return table


def docs_per_rank(folder: DataFolder, fingerprint: int, listed: Mapping[str, Mapping] | None = None) -> list[int]:
    """Documents read by each signature task (footer count of its band-0 file). ``listed``: the signature folder's
    listing (name relative to it -> size, ETag) when the caller has it: each file opens with the listing's size
    and version, no look-up first (on a store a HEAD), and a copy this process kept is not fetched again."""

    def opened(rank: int, world: int | None) -> RecordFile:
        path = signature_path(0, rank)
        entry = listed.get(path) if listed is not None else None
        size, version = (entry["size"], listed_version(entry)) if entry else (None, None)
        checked = {"rank": rank, "world_size": world} if world is not None else {}
        return open_records(folder, path, SIG_KIND, fingerprint, SIGNATURE, size=size, version=version, **checked)

    first = opened(0, None)
    world = first.header.world_size
    return [first.extra, *(opened(r, world).extra for r in range(1, world))]


def cluster_summary(kind: str, documents: int, in_clusters: int, histogram: dict[int, int]) -> dict:
    """``summary.json``'s fields from the cluster size histogram (size -> number of clusters)."""
    clusters = sum(histogram.values())
    return {
        "kind": kind,
        "documents": int(documents),
        "documents_in_clusters": int(in_clusters),
        "clusters": int(clusters),
        "removed": int(in_clusters - clusters),
        "largest_cluster": max(histogram, default=0),
        "cluster_size_histogram": {int(s): int(c) for s, c in sorted(histogram.items())},
    }


class DedupClusters(PipelineStep):
    """Read ``band_XX.pairs``, cluster, write ``<output>/<rank>.clusters`` and ``summary.json``."""

    type = "🫂 - DEDUP"
    name = "🎯 clusters"

    def __init__(
        self,
        pairs_folder: DataFolderLike,
        signatures_folder: DataFolderLike,
        output_folder: DataFolderLike,
        config: DedupConfig | None = None,
        kind: str = "minhash",
    ):
        super().__init__()
        self.pairs_folder = get_datafolder(pairs_folder)
        self.signatures_folder = get_datafolder(signatures_folder)
        self.output_folder = get_datafolder(output_folder)
        self.config = config or DedupConfig()
        self.kind = kind
        self.fingerprint = self.config.fingerprint(kind)
        self.signature_fingerprint = self.fingerprint  # the signature files this stage counts documents in

    # on a store, the signature folder listed once when the task starts, for the document counts and every band's
    # signature files (each band-0 file looked up and read, then a listing per band: round trips in turn)
    _signatures_listed: dict[str, dict] | None = None

    def _docs_per_rank(self) -> list[int]:
        return docs_per_rank(self.signatures_folder, self.signature_fingerprint, self._signatures_listed)

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        if world_size != 1:
            raise ValueError(f"the cluster stage runs as a single task, got {world_size}")
        if not self.signatures_folder.is_local():  # the signatures ran: the listing stays true for the task
            self._signatures_listed = self.signatures_folder.find("", detail=True)
        docs_per_rank = self._docs_per_rank()
        world = len(docs_per_rank)
        if all(
            is_valid(
                self.output_folder,
                clusters_path(r),
                CLUSTER_KIND,
                self.fingerprint,
                CLUSTER,
                rank=r,
                world_size=world,
            )
            for r in range(world)
        ) and self.output_folder.exists(SUMMARY):
            logger.info("clusters already complete, skipping")
            return
        table = self.clustered_nodes()
        ranks = node_rank(table["node"])
        bounds = np.searchsorted(ranks, np.arange(world + 1))
        for r in range(world):
            part = table[bounds[r] : bounds[r + 1]]
            records = np.empty(len(part), dtype=CLUSTER)
            records["doc"] = node_doc(part["node"])
            for field in ("size", "cluster", "keep"):
                records[field] = part[field]
            header = Header(CLUSTER_KIND, self.fingerprint, r, world, CLUSTER.itemsize)
            with RecordWriter(self.output_folder, clusters_path(r), header) as writer:
                writer.write(records)
                writer.commit(extra=docs_per_rank[r])
        self._write_summary(table, docs_per_rank)

    def clustered_nodes(self) -> np.ndarray:
        """The ``cluster_table`` of every document in a cluster: union-find over all bands' pairs."""
        bands = n_bands(self.config, self.kind)
        # on a store, every band's size from one listing (a HEAD per band file else); a missing band is
        # left to open_records to name
        listed = {} if self.pairs_folder.is_local() else self.pairs_folder.find("", maxdepth=1, detail=True)
        # and every band's signature files from one listing too (a listing per band else: 14 requests)
        signatures = self._signatures_listed
        if signatures is None and not self.signatures_folder.is_local():
            signatures = self.signatures_folder.find("", detail=True)

        def read(band: int) -> np.ndarray:
            entry = listed.get(pairs_path(band), {})
            found = band_pairs(
                self.pairs_folder,
                self.signatures_folder,
                band,
                bands,
                self.fingerprint,
                entry.get("size"),
                listed_version(entry),  # the driver's count_pairs read the small ones: not fetched again
                signatures,
            )
            return found.read_all()

        with self.track_time("read_pairs"):
            # on a store each band is a few round trips (its pairs file read whole, its signature listing and
            # files): the bands are read side by side, not one after another
            threads = 1 if self.pairs_folder.is_local() else min(bands, READ_THREADS)
            with ThreadPoolExecutor(max(threads, 1)) as pool:
                parts = list(pool.map(read, range(bands)))
            edges = np.concatenate(parts) if parts else np.empty(0, dtype=PAIR)
            del parts
        self.stat_update("pairs", value=len(edges))
        with self.track_time("union_find"):
            return cluster_table(edges["a"], edges["b"])

    def _write_summary(self, table: np.ndarray, docs_per_rank: list[int]) -> None:
        sizes = table["size"][table["keep"].astype(bool)]
        histogram = {int(s): int(c) for s, c in zip(*np.unique(sizes, return_counts=True), strict=True)}
        self.write_summary(cluster_summary(self.kind, sum(docs_per_rank), len(table), histogram))

    def write_summary(self, summary: dict) -> None:
        self.stat_update("clusters", value=summary["clusters"])
        self.stat_update("to_remove", value=summary["removed"])
        # one PUT on a store (a temp object and a "move" were a copy, a delete and four look-ups)
        atomic_write_text(self.output_folder.resolve_paths(SUMMARY), json.dumps(summary, indent=2))
        logger.info(f"dedup clusters ({self.kind}): {summary}")
