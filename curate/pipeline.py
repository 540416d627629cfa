"""The curate stage as a datatrove pipeline, in FineWeb's order (``examples/fineweb.py``), one task per WARC.

read WARC -> URL filter -> extract -> language -> signals -> Gopher repetition -> Gopher quality -> C4
-> FineWeb -> [quality classifier] -> PII -> [decontamination] -> write ``curated/``. Every step's name
is its id, and the documents it drops go to ``removed/<id>/`` with their reason. The recipe picks the
WARC library (warcio, fastwarc) and the extractor (trafilatura, resiliparse); either sits behind the
same step id and contract. ``judge_steps`` (the rules, PII and decontamination) is shared with
``python -m pipelines.refilter``, which judges stored documents again: the rules read stored signals,
decontamination reads the stored text, so neither needs extraction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

import pyarrow as pa
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.formatters import PIIFormatter
from datatrove.utils.typeshelper import StatHints

from classifiers.language_filter import FastTextLanguageFilter
from common.documents import DocumentWriter, document_schema
from curate.config import CurateConfig
from curate.extract import MainTextExtractor
from curate.extract_resiliparse import ResiliparseExtractor
from curate.warc import RobustWarcReader
from curate.warc_fastwarc import FastWarcReader
from filters.decontamination import Decontamination
from filters.quality import ALL_FAMILIES, QualitySignals, RuleFilter, signal_columns
from filters.url import OfflineURLFilter

MAY_HOLD_IP = re.compile(r"\.[0-9]")  # in every match of datatrove's IPv4 pattern
PII_DONE_KEY = "_pii_formatted"  # the text is already PII-formatted (refilter reading curated/); not a column
Step = TypeVar("Step", bound=PipelineStep)
READERS = {"warcio": RobustWarcReader, "fastwarc": FastWarcReader}
EXTRACTION = MainTextExtractor.name  # the extraction step's id, whichever extractor runs
DECONTAMINATION = "decontamination"
# datatrove's decontamination columns, beside filter_reason, in removed/decontamination/
CONTAMINATION_FIELDS = (pa.field("contaminated_ngram", pa.string()), pa.field("contaminated_task", pa.string()))


def curated_schema(extra: Sequence[pa.Field] = ()) -> pa.Schema:
    """The columns of ``curated/`` and ``removed/<id>/``: the document, its signals, its quality score."""
    return document_schema([*signal_columns(ALL_FAMILIES), "quality_score"], extra)


class ResiliparseStep(ResiliparseExtractor):
    """resiliparse under the extraction step's id (``removed/extraction/``, its stats), as trafilatura."""

    name = EXTRACTION


class DecontaminationStep(Decontamination):
    """Eval n-gram decontamination under its step id (``removed/decontamination/``, its stats)."""

    name = DECONTAMINATION


class Removed:
    """Gives a filtering step its exclusion writer: ``<folder>/<step id>/``, the step's name."""

    def __init__(self, folder: str):
        self.folder = folder
        self.schema = curated_schema()

    def schema_for(self, extra: Sequence[pa.Field] = ()) -> pa.Schema:
        """The curated columns plus ``extra``: columns a step adds (decontamination's match)."""
        return curated_schema(extra) if extra else self.schema

    def writer(self, step_id: str, extra: Sequence[pa.Field] = ()) -> DocumentWriter:
        return DocumentWriter(f"{self.folder}/{step_id}", self.schema_for(extra))

    def __call__(self, step: Step) -> Step:
        step.exclusion_writer = self.writer(step.name)
        return step


class PIISteps(PIIFormatter):
    """datatrove's ``PIIFormatter`` (emails, public IPs), skipping text formatted before.

    Its two patterns are tried only on text that holds what every match holds (an ``@``; a ``.``
    before a digit): the email pattern alone cost as much as the rest of the step, on every text.
    Text without either is left as datatrove leaves it, and the rotation of replacements moves
    only on a match, so the output is datatrove's."""

    name = "pii"

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            self.stat_update(StatHints.total)
            if not doc.metadata.pop(PII_DONE_KEY, False):
                with self.track_time():
                    doc.text = self.format(doc.text)
            yield doc

    def format(self, text: str) -> str:
        if self.remove_emails and "@" in text:
            text = self.emails_replacer.replace(text)
        if self.remove_ips and MAY_HOLD_IP.search(text):
            text = self.ip_replacer.replace(text)
        return text


def judge_steps(config: CurateConfig, removed: Removed, classify: bool = True) -> list[PipelineStep]:
    """The four rule families in FineWeb's order (C4 edits what it keeps), or DCLM's one family
    (``signals.heuristics: dclm``), [the quality classifier], PII, [decontamination]."""
    rules = config.rules.ordered(config.signals.heuristics)
    steps: list[PipelineStep] = [removed(RuleFilter(rule, config.signals)) for rule in rules]
    if classify:
        steps += quality_classifier_steps(config, removed)
    if config.pii.emails or config.pii.ips:
        steps.append(PIISteps(remove_emails=config.pii.emails, remove_ips=config.pii.ips))
    return steps + decontamination_steps(config, removed)


def build_curate_pipeline(
    config: CurateConfig, data_folder: str, paths_file: str, dump: str, curated: str, removed: str
) -> list[PipelineStep]:
    """Read ``paths_file`` (relative to ``data_folder``) -> ... -> ``curated``; drops to ``removed/<id>/``."""
    excluded = Removed(removed)
    languages = config.language.languages
    reader = READERS[config.reader.library]
    steps: list[PipelineStep] = [
        reader(data_folder, paths_file=paths_file, dump=dump, max_html_bytes=config.extraction.max_html_bytes)
    ]
    if config.url_filter.enabled:
        steps.append(excluded(OfflineURLFilter()))
    steps.append(excluded(extraction_step(config)))
    steps.append(
        excluded(
            FastTextLanguageFilter(
                languages=languages, threshold=config.language.threshold, model_path=config.language.model
            )
        )
    )
    steps.append(excluded(QualitySignals(config.signals, languages[0] if languages else "en", languages)))
    steps += judge_steps(config, excluded)
    steps.append(DocumentWriter(curated, excluded.schema))
    return steps


def extraction_step(config: CurateConfig) -> MainTextExtractor:
    """The recipe's extractor with the options every extractor shares (time limit, size cap, pre-check)."""
    extraction = config.extraction
    languages = config.language.languages
    shared = {
        "timeout": extraction.timeout,
        "max_html_bytes": extraction.max_html_bytes,
        "precheck_languages": languages if extraction.precheck.enabled else None,
        "precheck_threshold": extraction.precheck.threshold,
        "lid_model_path": config.language.model,
    }
    if extraction.extractor == "resiliparse":
        return ResiliparseStep(main_content=extraction.main_content, **shared)
    return MainTextExtractor(favour_precision=extraction.favour_precision, deduplicate=extraction.deduplicate, **shared)


def decontamination_steps(config: CurateConfig, removed: Removed) -> list[PipelineStep]:
    """Eval n-gram decontamination when the recipe names eval sets (``removed/decontamination/``)."""
    if not config.decontamination.enabled:
        return []
    return [DecontaminationStep(config.decontamination, removed.writer(DECONTAMINATION, CONTAMINATION_FIELDS))]


def quality_classifier_steps(config: CurateConfig, removed: Removed) -> list[PipelineStep]:
    """The optional fastText quality classifier; nothing when no model is set."""
    qc = config.quality_classifier
    if not qc.model:
        return []
    from classifiers.quality_filter import QualityClassifierFilter

    return [removed(QualityClassifierFilter(qc.model, threshold=qc.threshold, top_fraction=qc.top_fraction))]
