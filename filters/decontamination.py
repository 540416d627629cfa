"""Word n-gram decontamination: drop documents that contain an n-gram of an evaluation set.

Why: web text quotes benchmarks (WikiText articles are Wikipedia pages, BLiMP sentences are
everyday English), and a model trained on its eval items measures memory, not skill. The method and
normalisation are datatrove's ``NGramsDecontIndexer`` / ``NGramsDecontFilter`` (its tests are our
oracle): ``simplify_text`` with datatrove's default ``TextNormConfig``, spaCy English word tokens,
xxhash-64 of the space-joined n-gram; labels give their own n-grams and, with a query, the n-grams
that straddle query and label (``find_overlap_ngrams``). The default n is 13 (GPT-3's and Dolma's
choice; datatrove's default is 12). An item shorter than n words gives no n-gram, as in datatrove.

Unlike datatrove's indexer this needs no lighteval: eval sets are files (``filters.eval_sets``), and
the index is built in memory when the first document arrives (eval sets are small).
A removed document gets ``filter_reason = "contaminated[<set>]: <n-gram>"`` plus datatrove's
``contaminated_ngram`` / ``contaminated_task`` columns; stats count ``contaminated_<set>``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.text import TextNormConfig, simplify_text
from datatrove.utils.typeshelper import StatHints
from xxhash import xxh64_intdigest

from common.cli import integer
from filters.eval_sets import EvalItem, EvalSet, load_eval_set

REASON = "contaminated"


@dataclass(frozen=True)
class DecontaminationConfig:
    """Which eval sets, and how n-grams are formed (datatrove's ``NGramsDecontConfig`` fields)."""

    eval_sets: tuple[str, ...] = ()
    n_grams: int = 13  # GPT-3 (Brown et al. 2020, appendix C) and Dolma use 13-grams
    find_query_ngrams: bool = False  # datatrove default: prompts alone do not contaminate
    find_overlap_ngrams: bool = True  # datatrove default: n-grams straddling prompt and answer do

    def __post_init__(self) -> None:
        integer(1, 1 << 10).check(self.n_grams, "decontamination n_grams")  # GPT-3 and Dolma: 13

    @property
    def enabled(self) -> bool:
        return bool(self.eval_sets)


class WordTokens:
    """datatrove's decontamination words: spaCy English tokens of ``simplify_text(text)``."""

    def __init__(self) -> None:
        self._tokenizer = None
        self._norm = TextNormConfig()

    def __call__(self, text: str) -> list[str]:
        if self._tokenizer is None:
            from datatrove.utils.word_tokenizers import load_word_tokenizer

            self._tokenizer = load_word_tokenizer("en")
        return self._tokenizer.word_tokenize(simplify_text(text, self._norm))

    def __getstate__(self) -> dict:
        return {"_tokenizer": None, "_norm": self._norm}


def ngrams(tokens: Sequence[str], n: int) -> Iterable[str]:
    return (" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def item_ngrams(item: EvalItem, config: DecontaminationConfig, words: WordTokens) -> list[str]:
    """The n-grams of one eval item, as datatrove's ``NGramsDecontIndexer.compute_hashes`` forms them."""
    n = config.n_grams
    label = words(item.label)
    grams = list(ngrams(label, n))
    if item.query is not None:
        query = words(item.query)
        if config.find_query_ngrams:
            grams.extend(ngrams(query, n))
        if config.find_overlap_ngrams:
            grams.extend(
                " ".join(query[-n + 1 + i :] + label[: i + 1])
                for i in range(n - 1)
                if len(query) >= n - 1 - i and len(label) >= i + 1
            )
    return grams


class NGramIndex:
    """xxhash-64 of every eval n-gram -> the name of the first eval set that holds it."""

    def __init__(self, eval_sets: Sequence[EvalSet], config: DecontaminationConfig) -> None:
        self.config = config
        self.words = WordTokens()
        self.hashes: dict[int, str] = {}
        self.counts: dict[str, int] = {}
        for eval_set in eval_sets:
            before = len(self.hashes)
            for item in eval_set.items:
                for gram in item_ngrams(item, config, self.words):
                    self.hashes.setdefault(xxh64_intdigest(gram), eval_set.name)
            self.counts[eval_set.name] = len(self.hashes) - before

    @classmethod
    def from_config(cls, config: DecontaminationConfig) -> NGramIndex:
        return cls([load_eval_set(p) for p in config.eval_sets], config)

    def first_match(self, text: str) -> tuple[str, str] | None:
        """(eval set, n-gram) of the first eval n-gram in the text, in reading order; None if clean."""
        for gram in ngrams(self.words(text), self.config.n_grams):
            name = self.hashes.get(xxh64_intdigest(gram))
            if name is not None:
                return name, gram
        return None


class Decontamination(BaseFilter):
    """datatrove ``BaseFilter``: a document holding an eval n-gram goes to the exclusion writer
    (``removed/decontamination/``) with the set and the n-gram in ``filter_reason``."""

    name = "🦠 decontamination"

    def __init__(
        self,
        config: DecontaminationConfig,
        exclusion_writer: DiskWriter | None = None,
        index: NGramIndex | None = None,
    ) -> None:
        super().__init__(exclusion_writer)
        if not config.enabled and index is None:
            raise ValueError("decontamination needs at least one eval set")
        self.config = config
        self._index = index

    @property
    def index(self) -> NGramIndex:
        if self._index is None:
            self._index = NGramIndex.from_config(self.config)
            for name, count in self._index.counts.items():
                self.stat_update(f"index_ngrams_{name}", value=count)
        return self._index

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        match = self.index.first_match(doc.text)
        if match is None:
            return True
        name, gram = match
        doc.metadata["contaminated_ngram"] = gram
        doc.metadata["contaminated_task"] = name
        return False, f"{REASON}[{name}]: {gram}"

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        """BaseFilter's loop, with stats per eval set (the reason itself holds the n-gram)."""
        with self.exclusion_writer if self.exclusion_writer else contextlib.nullcontext() as writer:
            for doc in data:
                self.stat_update(StatHints.total)
                with self.track_time():
                    result = self.filter(doc)
                if result is True:
                    self.stat_update(StatHints.forwarded)
                    self.update_doc_stats(doc)
                    yield doc
                    continue
                task = doc.metadata["contaminated_task"]
                self.stat_update(StatHints.dropped, f"dropped_{REASON}", f"{REASON}_{task}")
                if writer is not None:
                    doc.metadata["filter_reason"] = result[1]
                    writer.write(doc, rank)
