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

import re
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from datatrove.utils.word_tokenizers import SpaCyTokenizer, load_word_tokenizer
from spacy.attrs import IDX, IS_PUNCT, IS_SPACE, LENGTH, ORTH

MAX_VOCAB_STRINGS = 1_000_000  # ~ a few hundred MB of lexemes and cache entries, then start afresh


# a token's part in spaCy's Sentencizer: a sentence-final character, other punctuation, whitespace, a word
SENT_END, PUNCT, SPACE, WORD = "S", "P", "X", "W"
# the Sentencizer starts a sentence at the first non-punctuation token after a sentence-final one
SENTENCE_START = re.compile(f"{SENT_END}[{SENT_END}{PUNCT}]*[{SPACE}{WORD}]")


@dataclass
class Tokenized:
    """Tokens of one text as parallel lists: ``starts`` (offsets into ``text``; -1 when the tokenizer
    gives none), ``texts`` (stripped: "" for whitespace tokens) and ``kinds`` (one of ``SENT_END``,
    ``PUNCT``, ``SPACE``, ``WORD`` per token, as a string)."""

    text: str
    starts: list[int]
    texts: list[str]
    kinds: str

    @property
    def words(self) -> list[str]:
        """datatrove's ``split_into_words``: token texts, stripped, empty ones dropped."""
        return list(filter(None, self.texts))

    def span(self, start: int, end: int, lo: int = 0) -> tuple[int, int]:
        """Index range of the tokens that begin in ``[start, end)`` of the text (searching from ``lo``)."""
        first = bisect_left(self.starts, start, lo)
        return first, bisect_left(self.starts, end, first)

    def word_count(self, first: int = 0, end: int | None = None) -> int:
        """Non-whitespace tokens among ``texts[first:end]``."""
        return sum(map(bool, self.texts[first:end]))

    def sentences(self, first: int = 0, end: int | None = None) -> int:
        """spaCy's Sentencizer's sentence count over tokens ``[first, end)``."""
        end = len(self.kinds) if end is None else end
        return count_sentences(self.kinds, first, end)


def count_sentences(kinds: str, first: int = 0, end: int | None = None) -> int:
    """spaCy's Sentencizer: a new sentence starts at the first non-punctuation token after a
    sentence-final character. The count is 1 + the number of such starts (0 without tokens)."""
    end = len(kinds) if end is None else end
    if end <= first:
        return 0
    return 1 + len(SENTENCE_START.findall(kinds, first, end))


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
        """Call inside ``batch()``; token strings are copied out so they outlive a pipeline reset.

        The token attributes come out of spaCy as one array (``Doc.to_array``), not one ``Token``
        object per token; a token's text is its slice of ``text``."""
        if not self.is_spacy:
            words = self._impl.word_tokenize(text)
            return Tokenized(text, [-1] * len(words), list(words), WORD * len(words))
        nlp = self._impl.tokenizer
        nlp.max_length = max(nlp.max_length, len(text) + 10)
        doc = nlp.make_doc(text)
        if not len(doc):
            return Tokenized(text, [], [], "")
        table = doc.to_array([IDX, LENGTH, IS_PUNCT, IS_SPACE, ORTH])
        starts = table[:, 0].astype(np.int64)
        ends = starts + table[:, 1].astype(np.int64)
        kinds = np.full(len(table), ord(WORD), dtype=np.uint8)
        kinds[table[:, 3] == 1] = ord(SPACE)
        kinds[table[:, 2] == 1] = ord(PUNCT)
        kinds[np.isin(table[:, 4], _punct_hashes(nlp))] = ord(SENT_END)
        starts_list = starts.tolist()
        texts = list(map(str.strip, map(text.__getitem__, map(slice, starts_list, ends.tolist()))))
        return Tokenized(text, starts_list, texts, kinds.tobytes().decode("ascii"))

    def sentences(self, line: str) -> int:
        """Sentence count of one stripped line (datatrove's ``len(split_into_sentences(line))``)."""
        if not self.is_spacy:
            return len(self._impl.sent_tokenize(line)) if line else 0
        return self.tokenize(line).sentences() if line else 0


@lru_cache(maxsize=8)
def _punct_hashes(nlp) -> np.ndarray:
    """The sentencizer's sentence-final characters as spaCy string hashes (a token's ``ORTH``), once
    per spaCy pipeline (hashed by identity)."""
    chars = nlp.get_pipe("sentencizer").punct_chars
    return np.array(sorted(nlp.vocab.strings[c] for c in chars), dtype=np.uint64)


@lru_cache(maxsize=32)
def _load(language: str):
    for key in (language, {"en": "eng"}.get(language, language)):
        try:
            return load_word_tokenizer(key)
        except ValueError:
            continue
    return load_word_tokenizer("eng")
