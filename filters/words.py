"""One word tokenization per document, shared by every quality signal.

datatrove's Gopher, C4 and FineWeb filters each run spaCy (tokenizer + sentencizer) over the text
again, and C4 once more per line. spaCy splits on whitespace before anything else, so the tokens of
a line are exactly the tokens of the whole text that fall inside it: one ``make_doc`` per document
serves the word lists of Gopher and FineWeb and C4's per-line sentence counts (the sentencizer's
rule is replayed on the line's tokens).

No spaCy memory zone: inside one, spaCy caches nothing (``Tokenizer._save_cached`` returns early).
Instead the vocabulary may grow to ``MAX_VOCAB_STRINGS`` and the pipeline is then rebuilt between
batches: memory stays bounded.

Where the language's tokenizer exceptions allow it (English: yes; Spanish, with "EE. UU.", no),
``filters.span_memo`` tokenizes each distinct whitespace span once and gathers a document's tokens
from the spans' (the same tokens: ``tests/filters/test_words.py`` compares with plain spaCy on real
and random text, also where a match across a space shadows one inside a word). On 620 English pages:
3.2x faster when warm (1.38 -> 0.43 CPU s), 1.25x from cold (2.2 -> 1.75 s). Otherwise spaCy tokenizes the
document, tuned without changing a token:

- Its cache may hold as many pieces as the vocabulary bound (10,000 by default; a web corpus has
  many more distinct ones).
- It caches nothing for the rest of a ``make_doc`` call once one piece was a special case, and a line
  break is one (a tokenizer exception). Long texts are therefore tokenized in chunks that end at a
  whitespace run holding a line break. Such a run is a token of its own in either case, the pieces
  between are split alike, and no special case can match across it (checked per pipeline: no
  exception but the line break itself holds one), so the chunks' tokens are the document's.

Either way, every new word's lexeme computes only ``is_punct`` and ``is_space`` (the two attributes
read here) instead of ~20 (shape, ``like_num``, ``like_url``, ...): the pipeline is ours, not
datatrove's shared one.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from datatrove.utils.word_tokenizers import SpaCyTokenizer, load_tokenizer_assignments
from spacy.attrs import IS_PUNCT, IS_SPACE

from filters import span_memo

MAX_VOCAB_STRINGS = (
    1_000_000  # vocabulary strings, and apart from them memo spans: a few hundred MB each, then start afresh
)
CHUNK_CHARS = 1_000  # a chunk ends at the first line-break run past this many characters
LINE_BREAK_RUN = re.compile(r"\s*\n\s*")  # \s is str.isspace(), spaCy's whitespace
TOKEN_ATTRS = span_memo.TOKEN_ATTRS  # offset, length, is_punct, is_space, string hash


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
            else:
                pipeline = _pipeline(self._impl)
                if pipeline.memo is not None and len(pipeline.memo) > MAX_VOCAB_STRINGS:
                    pipeline.memo = pipeline.new_memo()
        yield

    def tokenize(self, text: str) -> Tokenized:
        """Call inside ``batch()``; token strings are copied out so they outlive a pipeline reset.

        The token attributes come out of spaCy as one array (``Doc.to_array``), not one ``Token``
        object per token; a token's text is its slice of ``text``."""
        if not self.is_spacy:
            words = self._impl.word_tokenize(text)
            return Tokenized(text, [-1] * len(words), list(words), WORD * len(words))
        pipeline = _pipeline(self._impl)
        if pipeline.memo is not None:
            starts_list, texts, kinds = pipeline.memo.gather(text)
            return Tokenized(text, starts_list, texts, kinds.decode("ascii"))
        table = pipeline.token_table(text)
        if not len(table):
            return Tokenized(text, [], [], "")
        starts, texts = span_memo.token_texts(text, table)
        return Tokenized(text, starts.tolist(), texts, pipeline.kinds(table).tobytes().decode("ascii"))

    def sentences(self, line: str) -> int:
        """Sentence count of one stripped line (datatrove's ``len(split_into_sentences(line))``)."""
        if not self.is_spacy:
            return len(self._impl.sent_tokenize(line)) if line else 0
        return self.tokenize(line).sentences() if line else 0


class _Pipeline:
    """One spaCy pipeline, tuned for speed once when it is (re)built (see the module docstring)."""

    def __init__(self, nlp):
        from spacy.tokenizer import Tokenizer

        self.nlp = nlp
        rule_based = type(nlp.tokenizer) is Tokenizer  # not jieba, sudachi, pyvi...: those keep spaCy's defaults
        memo_fits = rule_based and span_memo.usable(nlp.tokenizer.rules)
        if rule_based:  # the memo holds each span once; without one, spaCy's cache holds up to the bound
            nlp.tokenizer.max_cache_size = 0 if memo_fits else MAX_VOCAB_STRINGS
            getters = nlp.vocab.lex_attr_getters
            nlp.vocab.lex_attr_getters = {attr: getters[attr] for attr in (IS_PUNCT, IS_SPACE) if attr in getters}
        self.chunked = rule_based and all(key == "\n" for key in nlp.tokenizer.rules if "\n" in key)
        # the sentencizer's sentence-final characters as string hashes (a token's ORTH)
        chars = nlp.get_pipe("sentencizer").punct_chars
        self.sentence_final = np.array(sorted(nlp.vocab.strings[c] for c in chars), dtype=np.uint64)
        self.memo = self.new_memo() if memo_fits else None

    def new_memo(self) -> span_memo.SpanMemo:
        # a word of ASCII letters is neither punctuation nor whitespace; it is sentence-final if such a letter is
        letters_final = any(c.isascii() and c.isalpha() for c in self.nlp.get_pipe("sentencizer").punct_chars)
        return span_memo.SpanMemo(self.nlp, self.kinds, None if letters_final else ord(WORD))

    def kinds(self, table: np.ndarray) -> np.ndarray:
        """The kind byte (``SENT_END``, ``PUNCT``, ``SPACE``, ``WORD``) of each ``TOKEN_ATTRS`` row."""
        kinds = np.full(len(table), ord(WORD), dtype=np.uint8)
        kinds[table[:, 3] == 1] = ord(SPACE)
        kinds[table[:, 2] == 1] = ord(PUNCT)
        kinds[self.is_sentence_final(table[:, 4])] = ord(SENT_END)
        return kinds

    def is_sentence_final(self, orths: np.ndarray) -> np.ndarray:
        """Which of these token strings (ORTH hashes) are sentence-final characters: a binary search
        in the sorted hashes (``np.isin`` compares every token with each of the ~90 characters)."""
        finals = self.sentence_final
        if not len(finals):
            return np.zeros(len(orths), dtype=bool)
        at = np.searchsorted(finals, orths)
        at[at == len(finals)] = 0
        return finals[at] == orths

    def token_table(self, text: str) -> np.ndarray:
        """``TOKEN_ATTRS`` of every token of ``text``, one row each (offsets into ``text``)."""
        self.nlp.max_length = max(self.nlp.max_length, len(text) + 10)
        if not self.chunked or len(text) <= CHUNK_CHARS:
            return self._table(text, 0)
        tables, start = [], 0
        while start < len(text):
            line_break = LINE_BREAK_RUN.search(text, start + CHUNK_CHARS)
            end = line_break.end() if line_break else len(text)
            tables.append(self._table(text[start:end], start))
            start = end
        return np.concatenate(tables)

    def _table(self, text: str, offset: int) -> np.ndarray:
        doc = self.nlp.make_doc(text)
        if not len(doc):
            return np.empty((0, len(TOKEN_ATTRS)), dtype=np.uint64)
        table = doc.to_array(TOKEN_ATTRS)
        table[:, 0] += offset
        return table


_tuned: dict[int, _Pipeline] = {}  # id of one of our SpaCyTokenizers (held by _load) -> its pipeline, tuned


def _pipeline(impl: SpaCyTokenizer) -> _Pipeline:
    """The tuned current pipeline of ``impl``; a rebuilt one (past the vocabulary bound) replaces the
    old one here, so the old one's memory is freed."""
    nlp = impl.tokenizer
    held = _tuned.get(id(impl))
    if held is None or held.nlp is not nlp:
        held = _tuned[id(impl)] = _Pipeline(nlp)
    return held


@lru_cache(maxsize=32)
def _load(language: str):
    """A word tokenizer of our own per language (datatrove's ``load_word_tokenizer`` hands out one
    shared instance, which its filters use: ours is tuned and rebuilt without touching theirs)."""
    factories = load_tokenizer_assignments()
    for key in (language, {"en": "eng"}.get(language, language), "eng"):
        if key in factories:
            return factories[key]()
    raise ValueError(f"no word tokenizer for {language!r}")
