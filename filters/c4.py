"""C4 (Raffel et al. 2020) as FineWeb ran it: a line-level edit of the text, then document-level drops.

datatrove's ``C4QualityFilter(filter_no_terminal_punct=False)``: lines with a too-long word, too few
words, "javascript" or a cookie/terms phrase are removed, citation marks are stripped; a page with
"lorem ipsum" or a curly bracket, or with too few sentences left, is dropped. The edit is computed
with the signals (one tokenization) and applied when the document passes (``filters.quality``).
The signals ``lorem_ipsum`` and ``curly_bracket`` hold the index of the first line that has them
(-1: none), so the rule still reports the one datatrove meets first; ``sentences`` is bounded by
``min_sentences`` (datatrove's ``min_num_sentences``, -1 switches it off).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from filters.rule import Bound, Rule, Signals, Verdict, column
from filters.words import Tokenized, WordTokenizer

FAMILY = "c4"
SIGNALS = ("lorem_ipsum", "curly_bracket", "sentences", "lines_removed")
CITATION_REGEX = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)


@dataclass(frozen=True)
class C4Options:
    """C4's line-level edit (fixed for a run: the stored text and signals depend on it)."""

    remove_citations: bool
    max_word_length: int
    min_words_per_line: int
    filter_javascript: bool
    filter_policy: bool


@dataclass
class C4Result:
    """C4's line-level edit of a document and the document-level facts its rule needs."""

    kept_lines: list[str]
    kept_words: int
    sentences: int
    lorem_ipsum_line: int
    curly_bracket_line: int
    lines_removed: int

    @property
    def text(self) -> str:
        return "\n".join(self.kept_lines).strip()

    def signals(self) -> dict[str, float]:
        return {
            "lorem_ipsum": float(self.lorem_ipsum_line),
            "curly_bracket": float(self.curly_bracket_line),
            "sentences": float(self.sentences),
            "lines_removed": float(self.lines_removed),
        }


def _line_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, stripped line)`` for each of ``text.splitlines()``, with offsets into text."""
    spans = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        stripped = body.strip()
        lead = len(body) - len(body.lstrip())
        spans.append((pos + lead, pos + lead + len(stripped), stripped))
        pos += len(raw)
    return spans


def edit(tok: Tokenized, tokenizer: WordTokenizer, options: C4Options) -> C4Result:
    """C4QualityFilter(filter_no_terminal_punct=False) line loop, without early exit."""
    kept: list[str] = []
    kept_words = sentences = removed = 0
    lorem_line = curly_line = -1
    t = 0
    for index, (start, end, line) in enumerate(_line_spans(tok.text)):
        first, t = tok.span(start, end, t)
        line_tokens = (tok, first, t)  # the line's tokens: a range of the document's
        words = line.split()
        if options.max_word_length != -1 and words and max(map(len, words)) > options.max_word_length:
            removed += 1
            continue
        if options.remove_citations and "[" in line:
            cleaned = CITATION_REGEX.sub("", line)
            if cleaned != line:
                line = cleaned
                retokenized = tokenizer.tokenize(line)
                line_tokens = (retokenized, 0, len(retokenized.texts))
        if len(words) < options.min_words_per_line:
            removed += 1
            continue
        lowered = line.lower()
        if lorem_line < 0 and "lorem ipsum" in lowered:
            lorem_line = index
        if options.filter_javascript and "javascript" in lowered:
            removed += 1
            continue
        if curly_line < 0 and "{" in line:
            curly_line = index
        if options.filter_policy and any(p in lowered for p in POLICY_SUBSTRINGS):
            removed += 1
            continue
        source, a, b = line_tokens
        sentences += source.sentences(a, b) if tokenizer.is_spacy else tokenizer.sentences(line)
        kept_words += source.word_count(a, b)
        kept.append(line)
    return C4Result(kept, kept_words, sentences, lorem_line, curly_line, removed)


@dataclass(frozen=True)
class C4Rule(Rule):
    """C4's document-level drops; its line-level edit is applied to the documents it keeps."""

    filter_lorem_ipsum: bool
    filter_curly_bracket: bool
    min_sentences: int | None

    FAMILY = FAMILY
    BOUNDS = (Bound("sentences", "min", "too_few_sentences", limits=(-1, math.inf)),)  # -1: off (datatrove)

    def check(self, signals: Signals) -> Verdict:
        lorem = int(signals[column(FAMILY, "lorem_ipsum")]) if self.filter_lorem_ipsum else -1
        curly = int(signals[column(FAMILY, "curly_bracket")]) if self.filter_curly_bracket else -1
        if lorem >= 0 and (curly < 0 or lorem <= curly):
            return False, "lorem_ipsum"
        if curly >= 0:
            return False, "curly_bracket"
        return super().check(signals)
