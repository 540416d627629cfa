"""Signals once, rules later (RedPajama-V2 style): the four rule families as datatrove steps.

``QualitySignals`` computes every family's signals from one spaCy tokenization and stores them as
columns beside the text (names: ``filters.rule``); one ``RuleFilter`` per family then judges the
stored columns, in FineWeb's order: Gopher repetition, Gopher quality, C4, FineWeb. The step's name is
the family id, which is also its ``removed/<id>/`` folder, its stats entry and its recipe section.
A different threshold needs no recomputation (``python -m pipelines.refilter``); what changes how a
signal is computed (``SignalOptions``) is fixed for a run.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.batching import batched

from filters import c4, fineweb, gopher_quality, gopher_repetition
from filters.rule import Rule, column
from filters.words import WordTokenizer

FAMILIES = (gopher_repetition, gopher_quality, c4, fineweb)  # FineWeb's order
C4_TEXT_KEY = "_c4_text"  # C4's edit of the text when already known; consumed by the C4 filter, not a column


@dataclass(frozen=True)
class SignalOptions:
    """How signals are computed, per family (the recipe's ``signals`` section)."""

    gopher_quality: gopher_quality.GopherQualityOptions
    c4: c4.C4Options
    fineweb: fineweb.FineWebOptions
    timeout: float  # seconds for one document's signals (spaCy's tokenizer is super-linear on hostile text)


@dataclass(frozen=True)
class Rules:
    """Each family's thresholds (the recipe's ``rules`` section), in FineWeb's order."""

    gopher_repetition: gopher_repetition.GopherRepetitionRule
    gopher_quality: gopher_quality.GopherQualityRule
    c4: c4.C4Rule
    fineweb: fineweb.FineWebRule

    def ordered(self) -> list[Rule]:
        return [getattr(self, f.name) for f in fields(self)]


def signal_columns() -> list[str]:
    """Every signal column, in a stable order (the parquet schema uses it)."""
    return [column(family.FAMILY, name) for family in FAMILIES for name in family.SIGNALS]


def compute_signals(text: str, tokenizer: WordTokenizer, options: SignalOptions) -> tuple[dict[str, float], str]:
    """Every family's signals of one document (as columns) and C4's edit of its text.

    Call inside ``tokenizer.batch()``, which bounds the tokenizer's memory.
    """
    tok = tokenizer.tokenize(text)
    edited = c4.edit(tok, tokenizer, options.c4)
    if tokenizer.is_spacy:  # FineWeb counts the words of the edited text; spaCy's line tokens already did
        kept_words = edited.kept_words
    else:
        kept_words = len(tokenizer.tokenize(edited.text).words)
    per_family = {
        gopher_repetition.FAMILY: gopher_repetition.signals(text, tok.words),
        gopher_quality.FAMILY: gopher_quality.signals(text, tok.words, options.gopher_quality),
        c4.FAMILY: edited.signals(),
        fineweb.FAMILY: fineweb.signals(edited.text, kept_words, options.fineweb),
    }
    columns = {column(family, name): value for family, values in per_family.items() for name, value in values.items()}
    return columns, edited.text


class QualitySignals(PipelineStep):
    """Annotate each document with every quality signal (metadata columns); drops nothing."""

    name = "signals"
    type = "📊 - STATS"

    def __init__(self, options: SignalOptions, default_language: str = "en", batch_size: int = 64):
        super().__init__()
        self.options = options
        self.default_language = default_language
        self.batch_size = batch_size
        self._tokenizers: dict[str, WordTokenizer] = {}

    def tokenizer_for(self, language: str | None) -> WordTokenizer:
        language = language or self.default_language
        if language not in self._tokenizers:
            self._tokenizers[language] = WordTokenizer(language)
        return self._tokenizers[language]

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for batch in batched(data, self.batch_size):
            with self.track_time("batch"):
                by_language: dict[str, list[Document]] = {}
                for doc in batch:
                    language = doc.metadata.get("language") or self.default_language
                    by_language.setdefault(language, []).append(doc)
                for language, docs in by_language.items():
                    tokenizer = self.tokenizer_for(language)
                    with tokenizer.batch():
                        for doc in docs:
                            signals, edited = compute_signals(doc.text, tokenizer, self.options)
                            doc.metadata.update(signals)
                            doc.metadata[C4_TEXT_KEY] = edited
            for doc in batch:
                self.stat_update("annotated")
                yield doc


class RuleFilter(BaseFilter):
    """One family's rule over the stored signals; the C4 family also edits the text of what it keeps."""

    def __init__(self, rule: Rule, options: SignalOptions, exclusion_writer: DiskWriter | None = None):
        self.name = rule.FAMILY  # before super().__init__: datatrove names the stats from it
        super().__init__(exclusion_writer)
        self.rule = rule
        self.options = options
        self._tokenizers: dict[str, WordTokenizer] = {}

    def filter(self, doc: Document):
        verdict = self.rule.check(doc.metadata)
        if verdict is True and self.rule.FAMILY == c4.FAMILY:
            doc.text = self._c4_text(doc)
        return verdict

    def _c4_text(self, doc: Document) -> str:
        edited = doc.metadata.pop(C4_TEXT_KEY, None)
        if edited is not None:
            return edited
        language = doc.metadata.get("language") or "en"  # read back from parquet (refilter): edit again
        tokenizer = self._tokenizers.setdefault(language, WordTokenizer(language))
        with tokenizer.batch():
            return c4.edit(tokenizer.tokenize(doc.text), tokenizer, self.options.c4).text
