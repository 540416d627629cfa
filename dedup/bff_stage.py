"""The BFF pass as datatrove steps: ``BffDedup`` (one task: the filter, in input order) writes per input
rank which documents to drop and which paragraphs to cut; ``BffFilter`` (one task per input file, in
``dedup_filter``) applies them.

Why one task: the filter is order-dependent (the first copy stays), so a deterministic run reads the
documents in one order, rank after rank, position after position. It resumes: after an input rank, when
``bff_checkpoint_seconds`` have passed since the last save, the filter and the number of ranks done are
written atomically (``state.filter``); a rerun loads them and goes on with the next rank, giving the same
files as an uninterrupted run. Memory is the filter (``FilterSize``, said in the log and by ``dedup.run``
before any work) plus one batch of documents.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable

import numpy as np
import pyarrow.parquet as pq
import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.logging import logger
from datatrove.utils.typeshelper import StatHints

from common.documents import DOCUMENT_GLOB
from dedup.bff import BffDecision, BffDeduper, BffParams, BloomFilter, FilterSize, cut_text
from dedup.config import DedupConfig
from dedup.records import CorruptFileError, Header, RecordWriter, is_valid, open_records

DECISION_KIND, CUT_KIND, STATE_KIND = b"BFFD", b"BFFC", b"BFFS"
# documents with something removed: dropped whole, or how many paragraphs were cut
DECISION = np.dtype([("doc", "<u4"), ("drop", "u1"), ("paragraphs", "<u4")])
CUT = np.dtype([("doc", "<u4"), ("start", "<u8"), ("end", "<u8")])  # character offsets of a cut paragraph
BITS = np.dtype("u1")
STATE = "state.filter"
SUMMARY = "summary.json"
REMOVED_COLUMN = "bff_paragraphs_removed"
BYTES_PER_NGRAM = 4  # the estimate: English text has about one UAX #29 token per 4-5 bytes


def decisions_path(rank: int) -> str:
    return f"{rank:05d}.decisions"


def cuts_path(rank: int) -> str:
    return f"{rank:05d}.cuts"


def estimate_ngrams(input_folder: DataFolderLike) -> int:
    """An overestimate of the n-grams to come (DCLM: overestimates are better): the uncompressed bytes of
    the parquet files' ``text`` column (their footers only) / ``BYTES_PER_NGRAM``."""
    folder = get_datafolder(input_folder)
    total = 0
    for path in folder.list_files(glob_pattern=DOCUMENT_GLOB):
        with folder.open(path, "rb") as f:
            meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if "text" in names:
            column = names.index("text")
            total += sum(meta.row_group(g).column(column).total_uncompressed_size for g in range(meta.num_row_groups))
    return max(1, total // BYTES_PER_NGRAM)


def plan_filter(config: DedupConfig, input_folder: DataFolderLike) -> FilterSize:
    """The filter a run allocates: from ``bff_expected_ngrams``, or the input's estimate, and the FP rate."""
    expected = config.bff_expected_ngrams or estimate_ngrams(input_folder)
    return FilterSize.for_rate(expected, config.bff_fp_rate)


def group_salt(doc: Document, group_by: str | None) -> int:
    """Documents of different groups (dumps) never match: their n-gram keys are xor-ed with different salts."""
    return 0 if group_by is None else xxhash.xxh64_intdigest(str(doc.metadata.get(group_by, "")))


class BffDedup(PipelineStep):
    """Run every input rank's documents (after ``document_steps``: the reader and earlier passes'
    filters) through one Bloom filter, in input order; write ``<rank>.decisions``, ``<rank>.cuts`` and
    ``summary.json``."""

    type = "🫂 - DEDUP"
    name = "🌸 BFF"

    def __init__(
        self,
        document_steps: list[PipelineStep],
        input_folder: DataFolderLike,
        output_folder: DataFolderLike,
        config: DedupConfig,
        doc_tasks: int,
    ):
        super().__init__()
        self.document_steps = document_steps
        self.input_folder = input_folder
        self.output_folder = get_datafolder(output_folder)
        self.config = config
        self.doc_tasks = doc_tasks
        self.fingerprint = config.fingerprint("bff")
        self.params = BffParams(config.bff_max_ngram, config.bff_min_ngram, config.bff_threshold)

    def documents(self, rank: int) -> Iterable[Document]:
        stream: DocumentsPipeline = None
        for step in self.document_steps:
            stream = step.run(stream, rank, self.doc_tasks)
        return stream or ()

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> None:
        if world_size != 1:
            raise ValueError(f"the BFF stage runs as a single task (it is order-dependent), got {world_size}")
        if self.output_folder.exists(SUMMARY) and all(self._rank_done(r) for r in range(self.doc_tasks)):
            logger.info("BFF decisions already complete, skipping")
            return
        size = plan_filter(self.config, self.input_folder)
        logger.info(size.describe())
        bloom, start = self._resume(size)
        saved = time.monotonic()
        for r in range(start, self.doc_tasks):
            with self.track_time("bff"):
                self._rank(r, BffDeduper(bloom, self.params))
            if r + 1 < self.doc_tasks and time.monotonic() - saved >= self.config.bff_checkpoint_seconds:
                self._save(bloom, r + 1)
                saved = time.monotonic()
        self._write_summary(size, bloom)
        with contextlib.suppress(FileNotFoundError):
            self.output_folder.rm(STATE)

    def _rank_done(self, r: int) -> bool:
        kw = {"rank": r, "world_size": self.doc_tasks}
        return is_valid(self.output_folder, decisions_path(r), DECISION_KIND, self.fingerprint, DECISION, **kw) and (
            is_valid(self.output_folder, cuts_path(r), CUT_KIND, self.fingerprint, CUT, **kw)
        )

    def _resume(self, size: FilterSize) -> tuple[BloomFilter, int]:
        """The saved filter and the next rank, when a checkpoint of this config and size is there."""
        try:
            state = open_records(self.output_folder, STATE, STATE_KIND, self.fingerprint, BITS, 0, self.doc_tasks)
        except CorruptFileError:
            return BloomFilter(size.size_bytes, size.hashers), 0
        done = state.extra
        if state.n_records != size.size_bytes or not all(self._rank_done(r) for r in range(done)):
            logger.warning(f"{state.where}: not this run's filter (size or earlier ranks differ); starting over")
            return BloomFilter(size.size_bytes, size.hashers), 0
        bits = np.empty(size.size_bytes, dtype=np.uint8)
        pos = 0
        for block in state.blocks():  # checksummed
            bits[pos : pos + len(block)] = block
            pos += len(block)
        logger.info(f"BFF: resuming after {done} of {self.doc_tasks} input ranks")
        return BloomFilter(size.size_bytes, size.hashers, bits), done

    def _save(self, bloom: BloomFilter, ranks_done: int) -> None:
        header = Header(STATE_KIND, self.fingerprint, 0, self.doc_tasks, BITS.itemsize)
        with RecordWriter(self.output_folder, STATE, header) as writer:
            writer.write(bloom.bits)
            writer.commit(extra=ranks_done)

    def _rank(self, r: int, deduper: BffDeduper) -> None:
        decisions, cuts, seen = [], [], 0
        batch: list[Document] = []

        def flush() -> None:
            nonlocal seen
            salts = [group_salt(d, self.config.group_by) for d in batch]
            for decision in deduper.decide([d.text for d in batch], salts):
                self._record(seen, decision, decisions, cuts)
                seen += 1
            batch.clear()

        for doc in self.documents(r):
            batch.append(doc)
            if len(batch) >= self.config.batch_docs:
                flush()
        flush()
        for path, kind, dtype, rows in (
            (decisions_path(r), DECISION_KIND, DECISION, decisions),
            (cuts_path(r), CUT_KIND, CUT, cuts),
        ):
            with RecordWriter(
                self.output_folder, path, Header(kind, self.fingerprint, r, self.doc_tasks, dtype.itemsize)
            ) as w:
                w.write(np.array(rows, dtype=dtype))
                w.commit(extra=seen)

    def _record(self, idx: int, decision: BffDecision, decisions: list, cuts: list) -> None:
        self.stat_update("documents")
        self.stat_update("ngrams", value=decision.ngrams)
        self.stat_update("contained_ngrams", value=decision.contained)
        if decision.drop:
            decisions.append((idx, 1, 0))
            self.stat_update("dropped")
        elif decision.cut:
            decisions.append((idx, 0, len(decision.cut)))
            cuts.extend((idx, a, b) for a, b in decision.cut)
            self.stat_update("documents_cut")
            self.stat_update("paragraphs_cut", value=len(decision.cut))

    def _write_summary(self, size: FilterSize, bloom: BloomFilter) -> None:
        counts = {"documents": 0, "removed": 0, "documents_cut": 0, "paragraphs_cut": 0}
        for r in range(self.doc_tasks):
            table = open_records(
                self.output_folder, decisions_path(r), DECISION_KIND, self.fingerprint, DECISION, r, self.doc_tasks
            )
            rows = table.read_all()
            counts["documents"] += table.extra
            counts["removed"] += int(rows["drop"].sum())
            counts["documents_cut"] += int((rows["drop"] == 0).sum())
            counts["paragraphs_cut"] += int(rows["paragraphs"].sum())
        fill = bloom.fill()
        summary = {
            "kind": "bff",
            **counts,
            "filter_bytes": size.size_bytes,
            "hashers": size.hashers,
            "expected_ngrams": size.expected_ngrams,
            "fp_rate": size.fp_rate,
            "bits_set": round(fill, 6),
            "fp_rate_now": fill**size.hashers,
        }
        with self.output_folder.open(SUMMARY + ".tmp", "wt") as f:
            json.dump(summary, f, indent=2)
        self.output_folder.mv(SUMMARY + ".tmp", SUMMARY)
        logger.info(f"BFF: {summary}")


class BffFilter(PipelineStep):
    """Apply a rank's BFF decisions: dropped documents go to ``exclusion_writer`` (``filter_reason =
    bff_duplicate``), the others lose their cut paragraphs; every document gets ``bff_paragraphs_removed``."""

    type = "🫂 - DEDUP"
    name = "bff"

    def __init__(
        self, decisions_folder: DataFolderLike, config: DedupConfig, exclusion_writer: DiskWriter | None = None
    ):
        super().__init__()
        self.decisions_folder = get_datafolder(decisions_folder)
        self.config = config
        self.fingerprint = config.fingerprint("bff")
        self.exclusion_writer = exclusion_writer

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        found = open_records(
            self.decisions_folder, decisions_path(rank), DECISION_KIND, self.fingerprint, DECISION, rank, world_size
        )
        decisions = {int(d): (bool(x), int(p)) for d, x, p in found.read_all().tolist()}
        cut_rows = open_records(
            self.decisions_folder, cuts_path(rank), CUT_KIND, self.fingerprint, CUT, rank, world_size
        ).read_all()
        cut_bounds = np.searchsorted(cut_rows["doc"], np.arange(found.extra + 1))
        seen = 0
        writer = self.exclusion_writer if self.exclusion_writer is not None else contextlib.nullcontext()
        with writer as excluded:
            for idx, doc in enumerate(data):
                seen = idx + 1
                drop, paragraphs = decisions.get(idx, (False, 0))
                doc.metadata[REMOVED_COLUMN] = paragraphs
                self.stat_update(StatHints.total)
                if drop:
                    self.stat_update(StatHints.dropped)
                    if excluded is not None:
                        doc.metadata["filter_reason"] = "bff_duplicate"
                        excluded.write(doc, rank)
                    continue
                if paragraphs and idx < found.extra:
                    rows = cut_rows[cut_bounds[idx] : cut_bounds[idx + 1]]
                    doc.text = cut_text(doc.text, list(zip(rows["start"].tolist(), rows["end"].tolist(), strict=True)))
                    self.stat_update("paragraphs_removed", value=paragraphs)
                self.stat_update(StatHints.forwarded)
                yield doc
            if seen != found.extra:
                raise CorruptFileError(
                    f"{found.where}: the BFF stage read {found.extra} documents for rank {rank}, this stage read "
                    f"{seen}; the input changed since"
                )
