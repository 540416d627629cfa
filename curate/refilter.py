"""Judge stored documents again: the curate stage's rule, C4-edit, PII and decontamination steps over
its own output.

Signals are stored beside the text, so a new threshold needs no extraction, language ID or
tokenization. The pipeline streams every document the rules saw (the kept ones, then each rule's
removed ones, in FineWeb's order, then decontamination's) through ``curate.pipeline.judge_steps`` into
new folders, and counts where each document was and where it went. Text that already is C4's output
(kept, or removed after C4) is not edited again, nor is text that passed PII (kept, or removed by
decontamination) formatted again; a document that newly passes gets both, as in the curate stage.
Decontamination reruns when the new recipe names eval sets (on the stored text, as in the curate
stage); without eval sets, documents it removed before are judged by the rules alone. The quality
classifier's drops are not read back (its step does not rerun).

Every document written carries where it was (``refilter_previously``: ``curated`` or the rule id of
its ``removed/`` folder) and why (``refilter_previous_reason``), so the output answers "which documents
did my new threshold drop, and which did it let back in?" (``pipelines.inspect --newly``, the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from common.documents import DocumentWriter
from common.run_dir import CURATED, PREVIOUS_REASON, PREVIOUSLY
from curate.config import CurateConfig
from curate.pipeline import (
    CONTAMINATION_FIELDS,
    DECONTAMINATION,
    PII_DONE_KEY,
    Removed,
    curated_schema,
    judge_steps,
)
from filters import c4
from filters.quality import C4_TEXT_KEY

REFILTER_FIELDS = (pa.field(PREVIOUSLY, pa.string()), pa.field(PREVIOUS_REASON, pa.string()))
KEPT = CURATED
PII_FORMATTED = (KEPT, DECONTAMINATION)  # origins whose text passed PII formatting


class Tally:
    """Documents by where they were (``before``) and went (``after``), why (``reasons``), ``moved``; the moved
    ones by the reason that removes them now or removed them before (``changes``)."""

    def __init__(self) -> None:
        self.before: Counter[str] = Counter()
        self.after: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.moved: Counter[tuple[str, str]] = Counter()
        self.changes: Counter[tuple[str, str, str]] = Counter()  # moved (from, to) by why it was or is removed

    def count(self, doc: Document, target: str) -> None:
        self.after[target] += 1
        if reason := doc.metadata.get("filter_reason"):
            self.reasons[f"{target}/{reason}"] += 1
        if (origin := doc.metadata[PREVIOUSLY]) != target:
            self.moved[(origin, target)] += 1
            why = doc.metadata.get(PREVIOUS_REASON) if target == KEPT else reason
            self.changes[(origin, target, (why or "(none)").split(": ", 1)[0])] += 1  # without its detail


class JudgedDocuments(PipelineStep):
    """The documents of ``(origin, folder)`` pairs, streamed in that order, marked with their origin."""

    name = "judged documents"
    type = "📖 - READER"

    def __init__(self, sources: list[tuple[str, Path]], tally: Tally):
        super().__init__()
        self.sources, self.tally = sources, tally

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        origins = [origin for origin, _ in self.sources]
        c4_output = origins[origins.index(c4.FAMILY) + 1 :]  # removed after C4 edited them
        for origin, folder in self.sources:
            for file in sorted(folder.glob("*.parquet")):
                for batch in pq.ParquetFile(file).iter_batches():
                    for row in batch.to_pylist():
                        text, doc_id = row.pop("text") or "", row.pop("id")
                        row[PREVIOUS_REASON] = row.get("filter_reason")
                        for judged_again in ("filter_reason", *(f.name for f in CONTAMINATION_FIELDS)):
                            row.pop(judged_again, None)
                        row[PREVIOUSLY] = origin
                        if origin == KEPT or origin in c4_output:
                            row[C4_TEXT_KEY] = text
                        row[PII_DONE_KEY] = origin in PII_FORMATTED
                        self.tally.before[origin] += 1
                        yield Document(text=text, id=doc_id, metadata=row)


class CountingWriter(DocumentWriter):
    """The document writer, counting what it writes into a ``Tally``."""

    def __init__(self, folder: str, schema: pa.Schema, target: str, tally: Tally):
        super().__init__(folder, schema)
        self.target, self.tally = target, tally

    def write(self, document: Document, rank: int = 0, **kwargs) -> None:
        self.tally.count(document, self.target)
        super().write(document, rank, **kwargs)


class CountedRemoved(Removed):
    """``removed/<rule id>/`` writers that count into a ``Tally``; every folder holds the refilter's columns."""

    def __init__(self, folder: str, tally: Tally):
        super().__init__(folder)
        self.tally = tally
        self.schema = curated_schema(REFILTER_FIELDS)

    def schema_for(self, extra: Sequence[pa.Field] = ()) -> pa.Schema:
        return curated_schema([*extra, *REFILTER_FIELDS]) if extra else self.schema

    def writer(self, step_id: str, extra: Sequence[pa.Field] = ()) -> DocumentWriter:
        return CountingWriter(f"{self.folder}/{step_id}", self.schema_for(extra), step_id, self.tally)


def rule_ids(config: CurateConfig) -> list[str]:
    return [rule.FAMILY for rule in config.rules.ordered(config.signals.heuristics)]


def judged_ids(config: CurateConfig, removed: Path) -> list[str]:
    """The folders of ``removed`` a refilter reads back and writes: the rules', and decontamination's
    when the run or the new recipe decontaminates."""
    ids = rule_ids(config)
    if config.decontamination.enabled or (removed / DECONTAMINATION).is_dir():
        ids.append(DECONTAMINATION)
    return ids


def build_refilter_pipeline(
    config: CurateConfig, curated: Path, removed: Path, out: Path, tally: Tally
) -> list[PipelineStep]:
    """``curated``, ``removed/<rule id>/`` and ``removed/decontamination/`` -> the rules of ``config``
    [and its decontamination] -> ``out/curated``, ``out/removed``."""
    sources = [(KEPT, curated)] + [(step, removed / step) for step in judged_ids(config, removed)]
    excluded = CountedRemoved(str(out / "removed"), tally)
    return [
        JudgedDocuments(sources, tally),
        *judge_steps(config, excluded, classify=False),
        CountingWriter(str(out / KEPT), excluded.schema, KEPT, tally),
    ]
