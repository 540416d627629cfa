"""Can an ablation decide? Signal, noise and ranking agreement per metric (Signal & Noise, Heineman et al.
2025; DataDecide, Magnusson et al. 2025), from the evaluation points of every run.

Input rows are the ablation's: `{"dataset", "seed", "step", "metrics": {name: value}}`. Per metric:

- score of a run: its last evaluation, or the mean of its last `average` evaluations (checkpoint
  averaging, which lowers the noise); a dataset's score is the mean over its seeds;
- signal: the spread between datasets relative to their mean, `(max - min) / |mean|` (S&N's relative
  dispersion);
- noise: the relative standard deviation over the last `window` evaluations of a run (S&N's checkpoint
  noise), averaged over runs; and the relative standard deviation over seeds of a dataset's score;
- SNR = signal / checkpoint noise (S&N's definition); SNR over seeds beside it;
- ranking agreement, per pair of datasets: the share of seed pairs (a run of each) and of the last
  `window` checkpoints (seed means at the same step) that order the pair as the dataset scores do;
- verdict: "decided" when every pair is ordered alike by all seed pairs and by at least 90 % of the
  checkpoints, and its gap exceeds twice the noise of the two datasets (checkpoint std, and seed std when
  there are seeds); else "not decided at this scale".
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

LOWER_IS_BETTER = ("bpb",)  # metric names containing these: smaller is better (bits per byte)


def lower_is_better(metric: str) -> bool:
    return any(tag in metric for tag in LOWER_IS_BETTER)


def _rel(value: float, mean: float) -> float:
    return value / abs(mean) if mean else math.inf


def _std(values: Sequence[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def metric_decision(
    rows: Sequence[Mapping[str, Any]], metric: str, window: int = 3, average: int = 1
) -> dict[str, Any]:
    """The signal, noise, SNR, pairwise agreement and verdict of one metric."""
    runs: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for r in rows:
        if metric in r["metrics"] and isinstance(r["metrics"][metric], (int, float)):
            runs.setdefault(r["dataset"], {}).setdefault(r["seed"], []).append((r["step"], float(r["metrics"][metric])))
    for seeds in runs.values():
        for points in seeds.values():
            points.sort()
    run_score = {
        (d, s): statistics.fmean(v for _, v in pts[-average:]) for d, seeds in runs.items() for s, pts in seeds.items()
    }
    score = {d: statistics.fmean(run_score[d, s] for s in seeds) for d, seeds in runs.items()}
    overall = statistics.fmean(score.values())
    ckpt_std = {
        d: statistics.fmean(_std([v for _, v in pts[-window:]]) for pts in seeds.values()) for d, seeds in runs.items()
    }
    seed_std = {d: _std([run_score[d, s] for s in seeds]) for d, seeds in runs.items()}
    signal = _rel(max(score.values()) - min(score.values()), overall)
    noise = _rel(statistics.fmean(ckpt_std.values()), overall)
    seed_noise = _rel(statistics.fmean(seed_std.values()), overall)
    pairs, decided = [], len(score) > 1
    for a, b in itertools.combinations(runs, 2):
        order = _sign(score[a] - score[b])
        seed_pairs = [_sign(run_score[a, sa] - run_score[b, sb]) == order for sa in runs[a] for sb in runs[b]]
        steps = sorted(
            set.intersection(*({st for st, _ in pts} for seeds in (runs[a], runs[b]) for pts in seeds.values()))
        )
        at = {
            d: {st: statistics.fmean(v for pts in runs[d].values() for s, v in pts if s == st) for st in steps}
            for d in (a, b)
        }
        ckpts = [_sign(at[a][st] - at[b][st]) == order for st in steps[-window:]]
        gap = abs(score[a] - score[b])
        noise_ab = max(ckpt_std[a], ckpt_std[b], seed_std[a], seed_std[b])
        pair = {
            "pair": [a, b],
            "better": (b if order > 0 else a) if lower_is_better(metric) else (a if order > 0 else b),
            "gap": gap,
            "seed_agreement": statistics.fmean(seed_pairs),
            "checkpoint_agreement": statistics.fmean(ckpts) if ckpts else math.nan,
        }
        pair["decided"] = bool(
            order != 0 and pair["seed_agreement"] == 1.0 and pair["checkpoint_agreement"] >= 0.9 and gap > 2 * noise_ab
        )
        decided = decided and pair["decided"]
        pairs.append(pair)
    ranking = sorted(score, key=lambda d: score[d], reverse=not lower_is_better(metric))
    return {
        "scores": score,
        "seed_std": seed_std,
        "checkpoint_std": ckpt_std,
        "signal": signal,
        "noise": noise,
        "seed_noise": seed_noise,
        "snr": signal / noise if noise else math.inf,
        "snr_seeds": signal / seed_noise if seed_noise else math.inf,
        "ranking": ranking,
        "pairs": pairs,
        "verdict": "decided" if decided else "not decided at this scale",
    }


def decisions(rows: Sequence[Mapping[str, Any]], window: int = 3, average: int = 1) -> dict[str, dict[str, Any]]:
    """`metric_decision` for every metric of the rows, in their order."""
    metrics = dict.fromkeys(m for r in rows for m, v in r["metrics"].items() if isinstance(v, (int, float)))
    return {m: metric_decision(rows, m, window, average) for m in metrics}
