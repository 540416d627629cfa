"""Pipeline steps: compute the signals once, then one datatrove filter per rule group."""

from __future__ import annotations

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.utils.batching import batched

from filters.rules import Rule
from filters.signals import SignalConfig, c4_lines, compute_signals
from filters.words import WordTokenizer

C4_TEXT_KEY = "_c4_text"  # C4's edited text, consumed by C4RuleFilter; not a column


class QualitySignals(PipelineStep):
    """Annotate each document with every quality signal (metadata columns); drops nothing."""

    name = "📐 Quality signals"
    type = "📊 - STATS"

    def __init__(
        self, config: SignalConfig | None = None, default_language: str = "en", batch_size: int = 64
    ):
        super().__init__()
        self.config = config or SignalConfig()
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
                    by_language.setdefault(doc.metadata.get("language") or self.default_language, []).append(
                        doc
                    )
                for language, docs in by_language.items():
                    tokenizer = self.tokenizer_for(language)
                    with tokenizer.batch():
                        for doc in docs:
                            signals, c4 = compute_signals(doc.text, tokenizer, self.config)
                            doc.metadata.update(signals)
                            doc.metadata[C4_TEXT_KEY] = c4.text
            for doc in batch:
                self.stat_update("annotated")
                yield doc


class RuleFilter(BaseFilter):
    """A datatrove filter that applies one rule group to the stored signals."""

    def __init__(self, rule: Rule, exclusion_writer=None):
        self.name = f"📏 {rule.name}"  # before super().__init__: datatrove names the stats from it
        super().__init__(exclusion_writer)
        self.rule = rule

    def filter(self, doc: Document):
        return self.rule.check(doc.metadata)


class C4RuleFilter(RuleFilter):
    """C4 also edits the text of the documents it keeps (drops javascript/policy/short lines)."""

    def __init__(self, rule: Rule, signal_config: SignalConfig | None = None, exclusion_writer=None):
        super().__init__(rule, exclusion_writer)
        self.signal_config = signal_config or SignalConfig()

    def filter(self, doc: Document):
        verdict = self.rule.check(doc.metadata)
        if verdict is True:
            cleaned = doc.metadata.pop(C4_TEXT_KEY, None)
            if cleaned is None:  # documents read back from parquet (refilter)
                tokenizer = WordTokenizer(doc.metadata.get("language") or "en")
                with tokenizer.batch():
                    cleaned = c4_lines(tokenizer.tokenize(doc.text), tokenizer, self.signal_config).text
            doc.text = cleaned
        return verdict
