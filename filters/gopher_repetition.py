"""Gopher repetition (Rae et al. 2021, Table A1): how much of a page is repeated lines, paragraphs, n-grams.

Definitions are datatrove's ``GopherRepetitionFilter`` exactly (its helpers are reproduced here over
our one tokenization); the signal names are datatrove's reasons, so ``dup_line_frac`` is the recipe's
``max_dup_line_frac``, the column ``gopher_repetition_dup_line_frac`` and the reason ``dup_line_frac``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from filters.rule import Bound, Rule, Signals, Verdict, column, ratio

FAMILY = "gopher_repetition"
TOP_N_GRAMS = (2, 3, 4)  # datatrove's default n of top_n_grams / dup_n_grams: the signals a run stores
DUP_N_GRAMS = (5, 6, 7, 8, 9, 10)
PARAGRAPH_SPLIT = re.compile(r"\n{2,}")
LINE_SPLIT = re.compile("\n+")
SIGNALS = (
    "dup_para_frac",
    "dup_para_char_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    *(f"top_{n}_gram" for n in TOP_N_GRAMS),
    *(f"duplicated_{n}_n_grams" for n in DUP_N_GRAMS),
)


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """Number of repeated items and their total characters (datatrove's definition)."""
    seen: set[str] = set()
    dup_items = dup_chars = 0
    for item in items:
        if item in seen:
            dup_items += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_items, dup_chars


def top_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by the most frequent word n-gram (first seen wins ties, as in datatrove)."""
    if len(words) < n:
        return 0
    counts = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    gram, count = counts.most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * count


def duplicated_ngram_chars(words: list[str], n: int) -> int:
    """Characters in non-overlapping repeated n-grams (datatrove's ``find_all_duplicate``)."""
    n_words = len(words)
    unique: set[str] = set()
    repeated, idx = 0, 0
    while idx < n_words - n + 1:
        gram = "".join(words[idx : idx + n])
        if gram in unique:
            repeated += len(gram)
            idx += n
        else:
            unique.add(gram)
            idx += 1
    return repeated


def signals(text: str, words: list[str]) -> dict[str, float]:
    """The family's signals of a non-empty text (an empty one has none: its rule says ``empty``)."""
    if not text:
        return {}
    paragraphs = PARAGRAPH_SPLIT.split(text.strip())
    para_dups, para_chars = find_duplicates(paragraphs)
    lines = LINE_SPLIT.split(text)
    line_dups, line_chars = find_duplicates(lines)
    length = len(text)
    out = {
        "dup_para_frac": ratio(para_dups, len(paragraphs)),
        "dup_para_char_frac": ratio(para_chars, length),
        "dup_line_frac": ratio(line_dups, len(lines)),
        "dup_line_char_frac": ratio(line_chars, length),
    }
    for n in TOP_N_GRAMS:
        out[f"top_{n}_gram"] = ratio(top_ngram_chars(words, n), length)
    for n in DUP_N_GRAMS:
        out[f"duplicated_{n}_n_grams"] = ratio(duplicated_ngram_chars(words, n), length)
    return out


@dataclass(frozen=True)
class GopherRepetitionRule(Rule):
    """Upper bounds on each repetition signal (fractions of lines, paragraphs or characters)."""

    max_dup_para_frac: float | None
    max_dup_para_char_frac: float | None
    max_dup_line_frac: float | None
    max_dup_line_char_frac: float | None
    max_top_2_gram: float | None
    max_top_3_gram: float | None
    max_top_4_gram: float | None
    max_duplicated_5_n_grams: float | None
    max_duplicated_6_n_grams: float | None
    max_duplicated_7_n_grams: float | None
    max_duplicated_8_n_grams: float | None
    max_duplicated_9_n_grams: float | None
    max_duplicated_10_n_grams: float | None

    FAMILY = FAMILY
    BOUNDS = (
        *(Bound(s, "max", s, zero_disables=True) for s in SIGNALS[:4]),  # datatrove: `if self.dup_... and`
        *(Bound(s, "max", s) for s in SIGNALS[4:]),
    )

    def check(self, signals: Signals) -> Verdict:
        if signals.get(column(FAMILY, "dup_para_frac")) is None:
            return False, "empty"
        return super().check(signals)
