"""How many times each document goes into the mixture, so every source gets its token share.

A source asked for T tokens with A available (after re-hydration, E) repeats every document
floor(T / E) times and adds one more copy of a seeded random subset of documents until the token
count is as close to T as whole documents allow, so the result is within one document of T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class InfeasibleMixture(ValueError):
    """The data cannot supply what the spec asks (weight x target > available x max_repetition)."""


@dataclass(frozen=True)
class Demand:
    """What one source must supply."""

    name: str
    weight: float
    requested_tokens: int
    available_tokens: int
    max_repetition: float


def requested_tokens(weight: float, target_tokens: int) -> int:
    return int(round(weight * target_tokens))


def check_feasible(demands: list[Demand]) -> None:
    """Raise InfeasibleMixture listing every source that would need more than max_repetition passes."""
    problems = []
    for d in demands:
        allowed = d.available_tokens * d.max_repetition
        if d.requested_tokens > allowed:
            problems.append(
                f"  {d.name}: weight {d.weight:.4f} x target = {d.requested_tokens:,} tokens > available "
                f"{d.available_tokens:,} x max_repetition {d.max_repetition:g} = {int(allowed):,} "
                f"(needs {d.requested_tokens / max(1, d.available_tokens):.3f} repetitions)"
            )
    if problems:
        raise InfeasibleMixture("mixture spec cannot be met:\n" + "\n".join(problems))


def plan_copies(
    lengths: np.ndarray, requested: int, rng: np.random.Generator, doc_weights: np.ndarray | None = None
) -> np.ndarray:
    """Copies per document (int64) whose token total is within one document of `requested`.

    `doc_weights` (re-hydration) scales each document's share: copies are proportional to weight x
    repetitions, with the fractional part spent on a weighted random subset (Efraimidis-Spirakis keys).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    weights = np.ones_like(lengths) if doc_weights is None else np.asarray(doc_weights, dtype=np.int64)
    epoch = int((lengths * weights).sum())
    if requested <= 0 or epoch == 0:
        return np.zeros_like(lengths)
    exact = weights * (requested / epoch)
    copies = np.floor(exact).astype(np.int64)
    remaining = requested - int((copies * lengths).sum())
    frac = exact - copies
    candidates = np.flatnonzero((frac > 0) & (lengths > 0))
    if remaining > 0 and len(candidates):
        keys = rng.random(len(candidates)) ** (1.0 / frac[candidates])
        order = candidates[np.argsort(-keys, kind="stable")]
        cum = np.cumsum(lengths[order])
        take = int(np.searchsorted(cum, remaining))  # first prefix reaching `remaining` is take + 1 docs
        if take < len(order):
            below = int(cum[take - 1]) if take > 0 else 0
            take += 1 if cum[take] - remaining <= remaining - below else 0
        copies[order[:take]] += 1
    return copies
