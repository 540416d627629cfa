"""The dedup stages as (name, steps, tasks) for an executor: what ``pipelines.run`` wires in.

Run directory layout (per dump)::

    curated/                 input documents (parquet)
    minhash/signatures/      band_XX/<rank>.sig      stage 1, one task per input file
    minhash/buckets/         band_XX.pairs           stage 2, one task per band
    minhash/clusters/        <rank>.clusters, summary.json   stage 3, one task
    deduped/                 <rank>.parquet          stage 4, kept documents + cluster columns
    removed/minhash/         <rank>.parquet          stage 4, the other members of each cluster
    minhash/exact/...        and removed/exact/      the same for the optional exact pass
    minhash/url/...          and removed/url_dedup/  the optional URL pass (signatures, clusters)
    minhash/index/           band_XX.keys, index.json  stage 2 (write_index): this dump's index, for later dumps
    minhash/cross_dump/      matches/, clusters/ and removed/cross_dump/  matches against earlier dumps
    minhash/bff/clusters/    <rank>.decisions, <rank>.cuts, summary.json  BFF (method "bff"), and removed/bff/

Passes run URL -> exact -> MinHash (or BFF); each later pass reads only what the earlier ones kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import ParquetReader
from datatrove.utils.logging import logger
from fsspec.implementations.local import LocalFileSystem

from common.bounded_input import InputRefused, refuse_parquet_bomb
from common.documents import DOCUMENT_GLOB, DocumentWriter, SharedSchema
from common.storage import join, keys_under, on_object_store
from dedup.bff_stage import REMOVED_COLUMN, BffDedup, BffFilter
from dedup.buckets import DedupBuckets
from dedup.config import DedupConfig
from dedup.filter import ID_COLUMN, SIZE_COLUMN, DedupFilter
from dedup.index import BandIndex, CrossDumpClusters, CrossDumpMatches, run_group_salt
from dedup.keys import n_bands
from dedup.signatures import DedupSignatures
from dedup.star import Rerun, Stage, cluster_stages
from dedup.urls import UrlClusters

CLUSTER_FIELDS = [pa.field(SIZE_COLUMN, pa.int64()), pa.field(ID_COLUMN, pa.int64())]
REASON_FIELD = pa.field("filter_reason", pa.string())
BFF_FIELDS = [pa.field(REMOVED_COLUMN, pa.int64())]


@dataclass(frozen=True)
class DedupLayout:
    """Where each stage reads and writes, relative to one run directory."""

    run_dir: str

    def part(self, *names: str) -> str:
        return join(self.run_dir, *names)

    def signatures(self, kind: str) -> str:
        return self.part(*self._base(kind), "signatures")

    def buckets(self, kind: str) -> str:
        return self.part(*self._base(kind), "buckets")

    def clusters(self, kind: str) -> str:
        return self.part(*self._base(kind), "clusters")

    def removed(self, kind: str) -> str:
        """``removed/<kind>/``; URL dedup writes ``removed/url_dedup/`` (``removed/url/`` is the URL filter's)."""
        return self.part("removed", "url_dedup" if kind == "url" else kind)

    @property
    def index(self) -> str:
        return self.part("minhash", "index")

    @property
    def deduped(self) -> str:
        return self.part("deduped")

    @staticmethod
    def _base(kind: str) -> tuple[str, ...]:
        return ("minhash",) if kind == "minhash" else ("minhash", kind)


def document_reader(input_folder: DataFolderLike) -> ParquetReader:
    """The reader both document passes use; both must see the same documents in the same order."""
    reader = ParquetReader(input_folder, glob_pattern=DOCUMENT_GLOB, text_key="text", id_key="id")
    reader.add_file_path = False  # keep the reader's bookkeeping out of the output columns
    return reader


def count_input_files(input_folder: DataFolderLike) -> int:
    """The document files (``DOCUMENT_GLOB``) below ``input_folder``; 0 when it is missing. On an object store
    one listing (the folder's look-up and a glob's listing were three round trips, one after another)."""
    folder = get_datafolder(input_folder)
    if on_object_store(folder.fs):  # the glob's match: any key below whose last part ends in .parquet
        return sum(1 for key in keys_under(folder.fs, folder.path) if key.rsplit("/", 1)[-1].endswith(".parquet"))
    return len(folder.list_files(glob_pattern=DOCUMENT_GLOB)) if folder.exists("") else 0


def check_parquet_footers(input_folder: DataFolderLike) -> None:
    """Every input document file is a parquet file with a `text` column (its footer read, no rows): a
    truncated or foreign file is one ValueError naming it before anything is written, not a traceback
    from a task after the output folder was made."""
    import pyarrow.parquet as pq

    folder = get_datafolder(input_folder)
    if not folder.exists(""):
        return
    local = isinstance(folder.fs, LocalFileSystem)
    for name in folder.list_files(glob_pattern=DOCUMENT_GLOB):
        path = folder.resolve_paths(name)
        if local and not folder.isfile(name):  # a FIFO named 00000.parquet: opening it waited for a writer for good
            raise ValueError(f"{path}: not a regular file (a FIFO or device is never read)")
        try:
            with folder.open(name, "rb") as handle:
                names = pq.ParquetFile(handle).schema_arrow.names
                handle.seek(0)
                refuse_parquet_bomb(handle, path, "text", folder.size(name))
        except InputRefused as err:
            raise ValueError(str(err)) from None
        except (OSError, ValueError, pa.ArrowException) as err:
            raise ValueError(f"{path}: not a readable parquet file ({err})") from None
        if "text" not in names:
            raise ValueError(f"{path}: no `text` column (columns: {', '.join(names)})")


def build_dedup_stages(
    input_folder: DataFolderLike,
    run_dir: str | Path,
    config: DedupConfig | None = None,
    tasks: int | None = None,
    write_index: bool = False,
    rerun: Rerun | None = None,
    forked: bool = False,
) -> Iterator[Stage]:
    """Stages to run in order, each yielded when the one before has run (the cluster passes are
    decided from the files the earlier ones wrote: see ``dedup.star.cluster_stages``).
    ``tasks``: document tasks (default: one per input parquet file, which makes the keep rule
    "first in file order"); pass the curation task count when the pipeline is built before
    ``curated/`` exists. ``write_index``: persist this dump's MinHash index (``minhash/index/``)
    for later dumps' ``dedup_against``. ``rerun``: how the driver makes a finished task run again (see
    ``dedup.star.drop_completions``), for a cluster pass's file damaged after its task finished. ``forked``: the
    stages' tasks run in processes forked from this one (the local executor), which may read their small inputs
    ahead for them (``DedupBuckets.list_ahead``)."""
    config = config or DedupConfig()
    layout = DedupLayout(str(run_dir))
    doc_tasks = max(1, tasks if tasks is not None else count_input_files(input_folder))
    kinds = [k for k, on in (("url", config.url_dedup), ("exact", config.exact_dedup)) if on]
    near = "bff" if config.method == "bff" else "minhash"
    for i, kind in enumerate([*kinds, near]):
        prefilters = [DedupFilter(layout.clusters(k), config, k, annotate=False) for k in kinds[:i]]
        if kind == "bff":  # one task over every rank in input order: the filter is order-dependent
            steps = [document_reader(input_folder), *prefilters]
            yield "dedup_bff", [BffDedup(steps, input_folder, layout.clusters("bff"), config, doc_tasks)], 1
        else:
            index = write_index and kind == "minhash"  # the index is MinHash's band keys; BFF writes none
            yield from _key_stages(kind, input_folder, layout, config, doc_tasks, prefilters, rerun, index, forked)
    if near == "minhash" and config.dedup_against:
        yield from _cross_dump_stages(input_folder, layout, config)
    schema = SharedSchema(input_folder)  # one listing and open of the input for the task's writers, not one each
    final_filters: list[PipelineStep] = [
        DedupFilter(
            layout.clusters(kind),
            config,
            kind,
            exclusion_writer=DocumentWriter(layout.removed(kind), schema_from=schema, extra_fields=[REASON_FIELD]),
            annotate=False,
        )
        for kind in kinds
    ]
    if near == "bff":
        bff_steps: list[PipelineStep] = [
            document_reader(input_folder),
            *final_filters,
            BffFilter(
                layout.clusters("bff"),
                config,
                DocumentWriter(layout.removed("bff"), schema_from=schema, extra_fields=[*BFF_FIELDS, REASON_FIELD]),
            ),
            DocumentWriter(layout.deduped, schema_from=schema, extra_fields=BFF_FIELDS),
        ]
        yield "dedup_filter", bff_steps, doc_tasks
        return
    filter_steps: list[PipelineStep] = [
        document_reader(input_folder),
        *final_filters,
        DedupFilter(
            layout.clusters("minhash"),
            config,
            "minhash",
            exclusion_writer=DocumentWriter(
                layout.removed("minhash"),
                schema_from=schema,
                extra_fields=[*CLUSTER_FIELDS, REASON_FIELD],
            ),
            cross_dump_folder=layout.clusters("cross_dump") if config.dedup_against else None,
            cross_dump_writer=DocumentWriter(
                layout.removed("cross_dump"), schema_from=schema, extra_fields=[REASON_FIELD]
            )
            if config.dedup_against
            else None,
        ),
        DocumentWriter(layout.deduped, schema_from=schema, extra_fields=CLUSTER_FIELDS),
    ]
    yield "dedup_filter", filter_steps, doc_tasks


def _band_index(input_folder: DataFolderLike, layout: DedupLayout, config: DedupConfig) -> BandIndex:
    """This dump's index, written by the MinHash bucket stage's band tasks. The documents' group is asked once
    here, not by each band's task: the curated documents are final (called once the signatures ran). A failure
    (several groups, an unreadable file) is left to the tasks, which raise it as they did."""
    try:
        group_salt = run_group_salt(input_folder, config.group_by)
    except Exception:  # noqa: BLE001
        group_salt = None
    return BandIndex(input_folder, layout.index, config, group_salt)


def _cross_dump_stages(input_folder: DataFolderLike, layout: DedupLayout, config: DedupConfig) -> list[Stage]:
    """This dump's matches against earlier dumps' indexes."""
    sigs, bands = layout.signatures("minhash"), config.num_buckets
    matches, clusters = layout.part("minhash", "cross_dump", "matches"), layout.clusters("cross_dump")
    return [
        ("dedup_cross_dump_matches", [CrossDumpMatches(input_folder, sigs, matches, config)], bands),
        ("dedup_cross_dump_clusters", [CrossDumpClusters(matches, sigs, clusters, config)], 1),
    ]


def _key_stages(
    kind: str,
    input_folder: DataFolderLike,
    layout: DedupLayout,
    config: DedupConfig,
    doc_tasks: int,
    prefilters: list[PipelineStep],
    rerun: Rerun | None = None,
    write_index: bool = False,
    forked: bool = False,
) -> Iterator[Stage]:
    prefix = "dedup" if kind == "minhash" else f"dedup_{kind}"
    sigs, buckets, clusters = layout.signatures(kind), layout.buckets(kind), layout.clusters(kind)
    signatures: Stage = (
        f"{prefix}_signatures",
        [document_reader(input_folder), *prefilters, DedupSignatures(sigs, config, kind)],
        doc_tasks,
    )
    yield signatures
    if kind == "url":  # grouped by URL key in memory: no LSH buckets
        yield f"{prefix}_clusters", [UrlClusters(sigs, sigs, clusters, config, kind)], 1
        return
    index = _band_index(input_folder, layout, config) if write_index else None
    bucket_step = DedupBuckets(sigs, buckets, config, kind, index).list_ahead(forked)  # the signatures ran
    for band in bucket_step.bands_without_index() if rerun is not None else ():
        logger.warning(f"{buckets}: band {band}'s pairs are there, its index part is not: its task runs again")
        rerun(f"{prefix}_buckets", band)
    yield f"{prefix}_buckets", [bucket_step], n_bands(config, kind)
    yield from cluster_stages(prefix, buckets, sigs, clusters, config, kind, rerun)
