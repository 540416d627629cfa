"""What a rule family is, and the one naming rule that ties recipe keys, signal columns and reasons.

A family (Gopher repetition, Gopher quality, C4, FineWeb; one module each) computes named signals once
per document and judges them later with thresholds, so a threshold can change without recomputing
(``python -m pipelines.refilter``). Names are mechanical, defined here once:

* a signal ``s`` of family ``f`` is stored in the column ``f"{f}_{s}"`` (``fineweb_char_dup_ratio``);
* the threshold that bounds it is the recipe key ``f"min_{s}"`` or ``f"max_{s}"`` of
  ``rules.<family>`` (``rules.fineweb.max_char_dup_ratio``);
* a failed bound drops the document with datatrove's reason string for that condition, which is the
  signal's own name wherever datatrove's reason names a measurement (``char_dup_ratio``), and
  datatrove's fixed phrase otherwise (``gopher_short_doc``). Parity with datatrove compares reasons.

A threshold of ``None`` (YAML ``null``) switches its condition off; where datatrove guards a condition
with ``if self.threshold and ...``, 0 does too (``Bound.zero_disables``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

Signals = Mapping[str, float | None]
Verdict = bool | tuple[bool, str]


def column(family: str, signal: str) -> str:
    """The column of a family's signal in the documents' parquet files."""
    return f"{family}_{signal}"


def ratio(a: float, b: float) -> float:
    """``a / b``; datatrove's edge cases: 0 when both are 0, infinite when only ``b`` is."""
    return a / b if b else (math.inf if a else 0.0)


FRACTION = (0.0, 1.0)  # a share of lines, words or characters
AMOUNT = (0.0, 1e9)  # a count, a length, a ratio that can pass 1 (newlines per word): no page has 1e9 words


@dataclass(frozen=True)
class Bound:
    """Drop with ``reason`` when ``signal`` is below ``min_<signal>`` or above ``max_<signal>``.

    ``limits`` is the range a threshold may take: a signal that is a fraction has no meaningful
    threshold outside [0, 1], and a negative count or 7 for a fraction is a typo that would silently keep
    or drop every document.
    """

    signal: str
    side: Literal["min", "max"]
    reason: str
    zero_disables: bool = False
    limits: tuple[float, float] = FRACTION

    @property
    def key(self) -> str:
        return f"{self.side}_{self.signal}"


class Rule:
    """A family's thresholds: a frozen dataclass whose fields include every ``Bound.key`` of ``BOUNDS``.

    ``check`` tests the bounds in ``BOUNDS`` order (datatrove's order) and returns the first failure.
    """

    FAMILY: ClassVar[str]
    BOUNDS: ClassVar[tuple[Bound, ...]]

    def __post_init__(self) -> None:
        """Every threshold inside its bound's limits (NaN is not); ``None`` switches a bound off."""
        for bound in self.BOUNDS:
            value = getattr(self, bound.key)
            low, high = bound.limits
            if value is not None and not low <= value <= high:
                raise ValueError(f"rules.{self.FAMILY}.{bound.key} must be in [{low:g}, {high:g}] or null, got {value}")

    def skips(self, bound: Bound, value: float) -> bool:
        """Whether a family-specific option lets ``value`` pass ``bound`` anyway."""
        return False

    def check(self, signals: Signals) -> Verdict:
        for bound in self.BOUNDS:
            limit = getattr(self, bound.key)
            if limit is None or (bound.zero_disables and not limit):
                continue
            value = signals[column(self.FAMILY, bound.signal)]
            failed = value < limit if bound.side == "min" else value > limit
            if failed and not self.skips(bound, value):
                return False, bound.reason
        return True
