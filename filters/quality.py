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

from common.sandbox import CpuTimedSandbox, run_sandboxed
from filters import c4, dclm, fineweb, gopher_quality, gopher_repetition
from filters.rule import Rule, column
from filters.words import WordTokenizer

FAMILIES = (gopher_repetition, gopher_quality, c4, fineweb)  # FineWeb's order
ALL_FAMILIES = (*FAMILIES, dclm)  # the curated schema's columns, whichever heuristics a recipe picks
HEURISTICS = ("fineweb", "dclm")  # signals.heuristics: FineWeb's four families, or DCLM-Baseline's one
C4_TEXT_KEY = "_c4_text"  # C4's / DCLM's edit of the text when already known; consumed by its filter, not a column


@dataclass(frozen=True)
class SignalOptions:
    """How signals are computed, per family (the recipe's ``signals`` section)."""

    gopher_quality: gopher_quality.GopherQualityOptions
    c4: c4.C4Options
    fineweb: fineweb.FineWebOptions
    timeout: float  # seconds for one document's signals (spaCy's tokenizer is super-linear on hostile text)
    heuristics: str = "fineweb"  # "dclm": DCLM-Baseline's heuristics (filters/dclm.py), no spaCy


@dataclass(frozen=True)
class Rules:
    """Each family's thresholds (the recipe's ``rules`` section), in FineWeb's order."""

    gopher_repetition: gopher_repetition.GopherRepetitionRule
    gopher_quality: gopher_quality.GopherQualityRule
    c4: c4.C4Rule
    fineweb: fineweb.FineWebRule
    dclm: dclm.DclmRule = dclm.DclmRule()  # DCLM-Baseline's thresholds; judged when signals.heuristics is dclm

    def ordered(self, heuristics: str = "fineweb") -> list[Rule]:
        """The families a recipe's heuristics judge, in order."""
        if heuristics == "dclm":
            return [self.dclm]
        return [getattr(self, f.name) for f in fields(self) if f.name != dclm.FAMILY]


def signal_columns(families: tuple = FAMILIES) -> list[str]:
    """Every signal column of ``families``, in a stable order (the parquet schema uses it)."""
    return [column(family.FAMILY, name) for family in families for name in family.SIGNALS]


def dclm_signals(text: str) -> tuple[dict[str, float], str]:
    """DCLM's signals (as columns) and its edit of the text: URLs, newlines, then its line edits."""
    values, edited = dclm.signals(dclm.edit_page(text))
    return {column(dclm.FAMILY, name): value for name, value in values.items()}, edited


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


class _SignalsOf:
    """(text, language) -> (signal columns, C4's edit): the work the sandbox child does for one document.

    It is handed to the child by fork, with the tokenizers the parent loaded, so a restarted child
    (after a timeout) is ready at once instead of loading spaCy again under the clock."""

    def __init__(self, options: SignalOptions, tokenizers: dict[str, WordTokenizer]):
        self.options = options
        self.tokenizers = tokenizers

    def __call__(self, text: str, language: str) -> tuple[dict[str, float], str]:
        if self.options.heuristics == "dclm":
            return dclm_signals(text)
        tokenizer = self.tokenizers.get(language) or self.tokenizers.setdefault(language, WordTokenizer(language))
        with tokenizer.batch():
            return compute_signals(text, tokenizer, self.options)


class QualitySignals(PipelineStep):
    """Annotate each document with every quality signal (metadata columns).

    The signals run in a child process killed after ``options.timeout`` CPU seconds per document
    (``common.sandbox.CpuTimedSandbox``, as extraction does): spaCy's tokenizer is super-linear on a long run without a
    space (50,000 U+FFFD from a binary page took 3 min 19 s), so a hostile document must not stall the
    task. Such a document is dropped with reason ``timeout`` (``removed/signals/``, counted in the stats);
    every other one goes on.
    """

    name = "signals"
    type = "📊 - STATS"

    def __init__(
        self,
        options: SignalOptions,
        default_language: str = "en",
        languages: tuple[str, ...] = (),
        exclusion_writer: DiskWriter | None = None,
    ):
        super().__init__()
        self.options = options
        self.default_language = default_language
        self.languages = tuple(dict.fromkeys((default_language, *languages)))
        self.exclusion_writer = exclusion_writer

    def _drop(self, doc: Document, reason: str, rank: int) -> None:
        self.stat_update("dropped", f"dropped_{reason}")
        if self.exclusion_writer is not None:
            doc.metadata["filter_reason"] = reason
            self.exclusion_writer.write(doc, rank)

    def _loaded_tokenizers(self) -> dict[str, WordTokenizer]:
        tokenizers: dict[str, WordTokenizer] = {}
        if self.options.heuristics == "dclm":  # whitespace and word boundaries: no spaCy to load
            dclm.load()  # its TLD list, here before the fork: each sandbox child starts with it
            return tokenizers
        for language in self.languages:
            tokenizers[language] = WordTokenizer(language)
            with tokenizers[language].batch():
                tokenizers[language].tokenize("warm up")  # spaCy loads on first use: here, before the fork
        return tokenizers

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from contextlib import ExitStack

        signals_of = _SignalsOf(self.options, self._loaded_tokenizers())
        with ExitStack() as stack:
            if self.exclusion_writer is not None:
                stack.enter_context(self.exclusion_writer)
            warmup = ("", self.default_language)
            sandbox = stack.enter_context(CpuTimedSandbox(timeout=self.options.timeout, warmup_text=warmup))
            for doc in data:
                self.stat_update("total")
                language = doc.metadata.get("language") or self.default_language
                with self.track_time():
                    result, failure = run_sandboxed(sandbox, (doc.text, language), signals_of)
                if result is None:
                    self._drop(doc, failure or "broken_process", rank)
                    continue
                signals, edited = result
                doc.metadata.update(signals)
                doc.metadata[C4_TEXT_KEY] = edited
                self.stat_update("forwarded")
                yield doc


class RuleFilter(BaseFilter):
    """One family's rule over the stored signals; the C4 and DCLM families also edit the text of what they keep
    (DCLM's edit, read back from parquet by ``pipelines.refilter``, is the stored text: it is kept as is)."""

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
        elif verdict is True and self.rule.FAMILY == dclm.FAMILY:
            doc.text = doc.metadata.pop(C4_TEXT_KEY, doc.text)
        return verdict

    def _c4_text(self, doc: Document) -> str:
        edited = doc.metadata.pop(C4_TEXT_KEY, None)
        if edited is not None:
            return edited
        language = doc.metadata.get("language") or "en"  # read back from parquet (refilter): edit again
        tokenizer = self._tokenizers.setdefault(language, WordTokenizer(language))
        with tokenizer.batch():
            return c4.edit(tokenizer.tokenize(doc.text), tokenizer, self.options.c4).text
