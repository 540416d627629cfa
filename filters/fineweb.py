"""FineWeb's own rules (Penedo et al. 2024, "custom filters"), over C4's edited text.

datatrove's ``FineWebQualityFilter``: the share of lines ending in punctuation, of short lines, of
characters in duplicated lines, and newlines per word. The signal names are datatrove's reasons:
``char_dup_ratio`` is the recipe's ``max_char_dup_ratio`` (datatrove's ``char_duplicates_ratio``),
the column ``fineweb_char_dup_ratio`` and the reason ``char_dup_ratio``.
"""

from __future__ import annotations

from dataclasses import dataclass

from datatrove.utils.text import TERMINAL_PUNCTUATION

from filters.gopher_repetition import find_duplicates
from filters.rule import AMOUNT, Bound, Rule, Signals, Verdict, column, ratio

FAMILY = "fineweb"
SIGNALS = ("lines", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")
STOP_CHARS = tuple(sorted(TERMINAL_PUNCTUATION))  # datatrove's default; sorted: stable across runs


@dataclass(frozen=True)
class FineWebOptions:
    """How the signals are computed (fixed for a run)."""

    short_line_length: int


def signals(cleaned: str, n_words: int, options: FineWebOptions) -> dict[str, float]:
    """The ratios of C4's output text (``n_words``: its words, as datatrove splits them)."""
    lines = [line for line in cleaned.split("\n") if line.strip() != ""]
    n = len(lines)
    return {
        "lines": float(n),
        "line_punct_ratio": ratio(sum(1 for x in lines if x.endswith(STOP_CHARS)), n),
        "short_line_ratio": ratio(sum(1 for x in lines if len(x) <= options.short_line_length), n),
        "char_dup_ratio": ratio(find_duplicates(lines)[1], len(cleaned.replace("\n", ""))),
        "list_ratio": ratio(cleaned.count("\n"), n_words),
    }


@dataclass(frozen=True)
class FineWebRule(Rule):
    """``line_punct_exclude_zero``: a page with no punctuated line passes the punctuation bound."""

    min_line_punct_ratio: float | None
    line_punct_exclude_zero: bool
    max_short_line_ratio: float | None
    max_char_dup_ratio: float | None
    max_list_ratio: float | None

    FAMILY = FAMILY
    BOUNDS = (
        *(Bound(s, side, s) for s, side in zip(SIGNALS[1:4], ("min", "max", "max"), strict=True)),
        Bound("list_ratio", "max", "list_ratio", limits=AMOUNT),  # newlines per word: a list can pass 1
    )

    def skips(self, bound: Bound, value: float) -> bool:
        return bound.signal == "line_punct_ratio" and value == 0 and self.line_punct_exclude_zero

    def check(self, signals: Signals) -> Verdict:
        if signals[column(FAMILY, "lines")] == 0:
            return False, "empty"
        return super().check(signals)
