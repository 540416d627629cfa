"""Evaluation figures shared by the LID evaluation and the quality classifier (no sklearn needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClassScores:
    n: int  # items whose gold label is this class
    accuracy: float  # share of them predicted as this class (per-class recall)
    precision: float
    f1: float


def per_class(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, ClassScores]:
    """Accuracy, precision and F1 for every gold class (a prediction outside the gold set counts
    against recall only; precision of class c counts every item predicted as c)."""
    if len(gold) != len(predicted):
        raise ValueError("gold and predicted differ in length")
    support = Counter(gold)
    hits = Counter(g for g, p in zip(gold, predicted, strict=True) if g == p)
    claimed = Counter(predicted)
    out = {}
    for label in sorted(support):
        recall = hits[label] / support[label]
        precision = hits[label] / claimed[label] if claimed[label] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[label] = ClassScores(support[label], recall, precision, f1)
    return out


def macro_f1(scores: dict[str, ClassScores]) -> float:
    return float(np.mean([s.f1 for s in scores.values()])) if scores else 0.0


def accuracy(gold: Sequence[str], predicted: Sequence[str]) -> float:
    return sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold) if gold else 0.0


def roc_auc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Area under the ROC curve = P(score of a random positive > a random negative), ties count 1/2."""
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average rank of each group of tied scores (1-based)
    boundaries = np.flatnonzero(np.diff(sorted_s)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(s)]))
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2.0
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def precision_recall(labels: Sequence[int], scores: Sequence[float], threshold: float) -> tuple[float, float]:
    """Precision and recall of 'positive' when kept means score >= threshold."""
    y = np.asarray(labels, dtype=bool)
    kept = np.asarray(scores, dtype=np.float64) >= threshold
    tp = int((kept & y).sum())
    precision = tp / int(kept.sum()) if kept.any() else 0.0
    recall = tp / int(y.sum()) if y.any() else 0.0
    return precision, recall


def top_fraction_threshold(scores: Sequence[float], fraction: float) -> float:
    """The highest score threshold that keeps at least ``fraction`` of ``scores`` (kept: >= t)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"top fraction must be in (0, 1], got {fraction}")
    s = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    if not len(s):
        raise ValueError("no scores to take a top fraction of")
    keep = max(1, int(np.ceil(fraction * len(s) - 1e-9)))
    return float(s[keep - 1])


def quantiles(scores: Sequence[float], points: int = 1001) -> list[float]:
    """Score quantiles at ``points`` evenly spaced probabilities (0 .. 1), for later threshold lookup."""
    return [float(x) for x in np.quantile(np.asarray(scores, dtype=np.float64), np.linspace(0, 1, points))]


def threshold_from_quantiles(qs: Sequence[float], fraction: float) -> float:
    """Threshold keeping about ``fraction`` of the distribution the quantiles describe."""
    if not 0 < fraction <= 1:
        raise ValueError(f"top fraction must be in (0, 1], got {fraction}")
    probs = np.linspace(0, 1, len(qs))
    return float(np.interp(1.0 - fraction, probs, np.asarray(qs, dtype=np.float64)))
