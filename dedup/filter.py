"""Stage 4: keep one document per cluster, annotate cluster size and id, route the rest away.

Reads the documents exactly as the signature stage did (same reader, same task count), so the
n-th document of a task is the n-th signature; the count is checked at the end and a mismatch
(input changed between stages) is an error, which also discards this task's output files.
"""

from __future__ import annotations

import contextlib

from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.typeshelper import StatHints

from dedup.config import DedupConfig
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.records import CorruptFileError, open_records

SIZE_COLUMN = "minhash_cluster_size"
ID_COLUMN = "minhash_cluster_id"


class DedupFilter(PipelineStep):
    """Forward kept documents; removed ones go to ``exclusion_writer`` (e.g. ``removed/minhash/``)
    with ``filter_reason`` set to ``minhash_duplicate`` or ``exact_duplicate``, as curation does."""

    type = "🫂 - DEDUP"
    name = "🎯 dedup filter"

    def __init__(
        self,
        clusters_folder: DataFolderLike,
        config: DedupConfig | None = None,
        kind: str = "minhash",
        exclusion_writer: DiskWriter | None = None,
        annotate: bool = True,
        cross_dump_folder: DataFolderLike | None = None,
        cross_dump_writer: DiskWriter | None = None,
    ):
        self.name = kind  # the step id (removed/<kind>/, stats); before super().__init__, which names the stats
        super().__init__()
        self.clusters_folder = get_datafolder(clusters_folder)
        self.config = config or DedupConfig()
        self.kind = kind
        self.fingerprint = self.config.fingerprint(kind)
        self.exclusion_writer = exclusion_writer
        self.annotate = annotate
        # cross-dump matches are positions in this pass's stream (they come from its signatures), so
        # this filter drops them too, before its own keep rule: reason ``cross_dump_duplicate``
        self.cross_dump_folder = get_datafolder(cross_dump_folder) if cross_dump_folder else None
        self.cross_dump_writer = cross_dump_writer

    def _cross_dump_drops(self, rank: int, world_size: int, documents: int) -> set[int]:
        if self.cross_dump_folder is None:
            return set()
        fp = self.config.fingerprint("cross_dump")
        found = open_records(self.cross_dump_folder, clusters_path(rank), CLUSTER_KIND, fp, CLUSTER, rank, world_size)
        if found.extra != documents:
            raise CorruptFileError(f"{found.where}: made for {found.extra} documents, the signatures hold {documents}")
        return set(found.read_all()["doc"].tolist())

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        clusters = open_records(
            self.clusters_folder,
            clusters_path(rank),
            CLUSTER_KIND,
            self.fingerprint,
            CLUSTER,
            rank=rank,
            world_size=world_size,
        )
        table = clusters.read_all()
        docs, sizes, ids, keep = (table[f].tolist() for f in ("doc", "size", "cluster", "keep"))
        j, n = 0, len(docs)
        seen = 0
        cross_dump = self._cross_dump_drops(rank, world_size, clusters.extra)
        writer = self.exclusion_writer if self.exclusion_writer is not None else contextlib.nullcontext()
        other = self.cross_dump_writer if self.cross_dump_writer is not None else contextlib.nullcontext()
        with writer as excluded, other as cross_excluded:
            for idx, doc in enumerate(data):
                seen = idx + 1
                if idx in cross_dump:
                    while j < n and docs[j] <= idx:
                        j += 1
                    self.stat_update(StatHints.total, StatHints.dropped, "dropped_cross_dump_duplicate")
                    if cross_excluded is not None:
                        doc.metadata["filter_reason"] = "cross_dump_duplicate"
                        cross_excluded.write(doc, rank)
                    continue
                if j < n and docs[j] == idx:
                    size, cid, kept = sizes[j], ids[j], bool(keep[j])
                    j += 1
                else:
                    size, cid, kept = 1, -1, True
                if self.annotate:
                    doc.metadata[SIZE_COLUMN] = size
                    doc.metadata[ID_COLUMN] = cid
                self.stat_update(StatHints.total)
                if kept:
                    self.stat_update(StatHints.forwarded)
                    yield doc
                else:
                    self.stat_update(StatHints.dropped)
                    if excluded is not None:
                        doc.metadata["filter_reason"] = f"{self.kind}_duplicate"
                        excluded.write(doc, rank)
            if seen != clusters.extra:
                raise CorruptFileError(
                    f"{clusters.where}: the signature stage read {clusters.extra} documents for rank {rank}, "
                    f"this stage read {seen}; the input changed since signatures were computed"
                )
