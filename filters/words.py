"""One word tokenization per document, shared by every quality signal.

datatrove's Gopher, C4 and FineWeb filters each run spaCy (tokenizer + sentencizer) over the text
again, and C4 once more per line. spaCy splits on whitespace before anything else, so the tokens of
a line are exactly the tokens of the whole text that fall inside it: one ``make_doc`` per document
serves the word lists of Gopher and FineWeb and C4's per-line sentence counts (the sentencizer's
rule is replayed on the line's tokens).

No spaCy memory zone: inside one, spaCy's tokenizer caches nothing (``Tokenizer._save_cached``
returns early), so every whitespace chunk of every document went through the affix rules again.
Instead the vocabulary (which the cache needs) may grow to ``MAX_VOCAB_STRINGS`` and the pipeline is
then rebuilt between batches: the cache works and memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from datatrove.utils.word_tokenizers import SpaCyTokenizer, load_word_tokenizer

MAX_VOCAB_STRINGS = 1_000_000  # ~ a few hundred MB of lexemes and cache entries, then start afresh


@dataclass
class Tokenized:
    """Tokens of one text: ``(start offset, stripped text, is_space, is_punct, in_punct_chars)``."""

    text: str
    tokens: list[tuple[int, str, bool, bool, bool]]

    @property
    def words(self) -> list[str]:
        """datatrove's ``split_into_words``: token texts, stripped, empty ones dropped."""
        return [t[1] for t in self.tokens if t[1]]


def count_sentences(tokens: list[tuple[int, str, bool, bool, bool]]) -> int:
    """spaCy's Sentencizer: a new sentence starts at the first non-punctuation token after a
    sentence-final character. The count is 1 + the number of such starts."""
    if not tokens:
        return 0
    count, seen_period = 1, False
    for _, _, _, is_punct, in_punct_chars in tokens:
        if seen_period and not is_punct and not in_punct_chars:
            count += 1
            seen_period = False
        elif in_punct_chars:
            seen_period = True
    return count


class WordTokenizer:
    """spaCy fast path for the languages datatrove tokenizes with spaCy; others are delegated."""

    def __init__(self, language: str = "en"):
        self.language = language
        self._impl = _load(language)

    @property
    def is_spacy(self) -> bool:
        return isinstance(self._impl, SpaCyTokenizer)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """A batch of documents; before it, a spaCy pipeline whose vocabulary outgrew the bound is
        rebuilt (datatrove's ``SpaCyTokenizer`` creates a fresh one on next use)."""
        if self.is_spacy and self._impl._tokenizer is not None:
            if len(self._impl._tokenizer.vocab.strings) > MAX_VOCAB_STRINGS:
                self._impl._tokenizer = None
        yield

    def tokenize(self, text: str) -> Tokenized:
        """Call inside ``batch()``; token strings are copied out so they outlive a pipeline reset."""
        if not self.is_spacy:
            words = self._impl.word_tokenize(text)
            return Tokenized(text, [(-1, w, False, False, False) for w in words])
        nlp = self._impl.tokenizer
        punct_chars = _punct_chars(nlp)
        nlp.max_length = max(nlp.max_length, len(text) + 10)
        doc = nlp.make_doc(text)
        return Tokenized(
            text,
            [(t.idx, t.text.strip(), t.is_space, t.is_punct, t.text in punct_chars) for t in doc],
        )

    def sentences(self, line: str) -> int:
        """Sentence count of one stripped line (datatrove's ``len(split_into_sentences(line))``)."""
        if not self.is_spacy:
            return len(self._impl.sent_tokenize(line)) if line else 0
        return count_sentences(self.tokenize(line).tokens) if line else 0


@lru_cache(maxsize=8)
def _punct_chars(nlp) -> frozenset[str]:
    """The sentencizer's sentence-final characters, once per spaCy pipeline (hashed by identity)."""
    return frozenset(nlp.get_pipe("sentencizer").punct_chars)


@lru_cache(maxsize=32)
def _load(language: str):
    for key in (language, {"en": "eng"}.get(language, language)):
        try:
            return load_word_tokenizer(key)
        except ValueError:
            continue
    return load_word_tokenizer("eng")
