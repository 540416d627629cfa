"""Gopher quality (Rae et al. 2021, section A.1.1): word counts and lengths, symbols, bullets, stop words.

Definitions are datatrove's ``GopherQualityFilter``. datatrove's reasons here are fixed phrases
(``gopher_short_doc``), so each bound names its reason; the thresholds are ``min_``/``max_`` of the
signal they bound (datatrove's ``min_doc_words`` is ``min_word_count``, its one
``max_symbol_word_ratio`` is ``max_hash_word_ratio`` and ``max_ellipsis_word_ratio``).
"""

from __future__ import annotations

import math
import string
from collections import Counter
from dataclasses import dataclass

from datatrove.utils.text import PUNCTUATION_SET

from filters.rule import AMOUNT, FRACTION, Bound, Rule, ratio

FAMILY = "gopher_quality"
# str.strip(chars) removes a word entirely exactly when every character of it is in chars: one C call
# instead of a generator per word
PUNCTUATION = "".join(sorted(PUNCTUATION_SET))
ASCII_NON_LETTERS = "".join(sorted(set(map(chr, range(128))) - set(string.ascii_letters)))
SIGNALS = (
    "word_count",
    "mean_word_length",
    "hash_word_ratio",
    "ellipsis_word_ratio",
    "bullet_lines_ratio",
    "end_ellipsis_lines_ratio",
    "alpha_words_ratio",
    "stop_word_count",
)


@dataclass(frozen=True)
class GopherQualityOptions:
    """How the signals are computed (fixed for a run)."""

    stop_words: tuple[str, ...]


def signals(text: str, words: list[str], options: GopherQualityOptions) -> dict[str, float]:
    """datatrove's per-word tests run once per distinct word, weighted by its count (words recur)."""
    n_words = len(words)
    counts = Counter(words)
    non_symbol = [w for w in counts if w.strip(PUNCTUATION)]  # a character outside PUNCTUATION_SET
    n_non_symbol = sum(map(counts.__getitem__, non_symbol))
    non_symbol_chars = sum(len(w) * counts[w] for w in non_symbol)
    alpha_words = sum(counts[w] for w in counts if has_letter(w))
    lines = text.splitlines()
    n_lines = len(lines)
    return {
        "word_count": float(n_non_symbol),
        "mean_word_length": (non_symbol_chars / n_non_symbol) if n_non_symbol else math.nan,
        "hash_word_ratio": ratio(text.count("#"), n_words),
        "ellipsis_word_ratio": ratio(text.count("...") + text.count("…"), n_words),
        "bullet_lines_ratio": ratio(sum(s.lstrip().startswith(("•", "-")) for s in lines), n_lines),
        "end_ellipsis_lines_ratio": ratio(sum(s.rstrip().endswith(("...", "…")) for s in lines), n_lines),
        "alpha_words_ratio": ratio(alpha_words, n_words),
        "stop_word_count": float(len(set(options.stop_words).intersection(counts))),
    }


def has_letter(word: str) -> bool:
    """datatrove's ``any(c.isalpha() for c in word)``; an ASCII word without a letter strips to nothing."""
    if word.isascii():
        return bool(word.strip(ASCII_NON_LETTERS))
    return any(c.isalpha() for c in word)


@dataclass(frozen=True)
class GopherQualityRule(Rule):
    """Bounds in datatrove's order; 0 switches a bound off, as datatrove's ``if self.x and`` does.

    A page without a non-symbol word has no mean word length (NaN), which passes both of its bounds.
    """

    min_word_count: float | None
    max_word_count: float | None
    min_mean_word_length: float | None
    max_mean_word_length: float | None
    max_hash_word_ratio: float | None
    max_ellipsis_word_ratio: float | None
    max_bullet_lines_ratio: float | None
    max_end_ellipsis_lines_ratio: float | None
    min_alpha_words_ratio: float | None
    min_stop_word_count: float | None

    FAMILY = FAMILY
    BOUNDS = tuple(
        Bound(signal, side, reason, zero_disables=True, limits=limits)
        for signal, side, reason, limits in (
            ("word_count", "min", "gopher_short_doc", AMOUNT),
            ("word_count", "max", "gopher_long_doc", AMOUNT),
            ("mean_word_length", "min", "gopher_below_avg_threshold", AMOUNT),
            ("mean_word_length", "max", "gopher_above_avg_threshold", AMOUNT),
            ("hash_word_ratio", "max", "gopher_too_many_hashes", AMOUNT),  # '#' and '...' per word: can pass 1
            ("ellipsis_word_ratio", "max", "gopher_too_many_ellipsis", AMOUNT),
            ("bullet_lines_ratio", "max", "gopher_too_many_bullets", FRACTION),
            ("end_ellipsis_lines_ratio", "max", "gopher_too_many_end_ellipsis", FRACTION),
            ("alpha_words_ratio", "min", "gopher_below_alpha_threshold", FRACTION),
            ("stop_word_count", "min", "gopher_enough_stop_words", AMOUNT),
        )
    )
