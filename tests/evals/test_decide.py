"""evals.decide: signal, noise, SNR, ranking agreement and the verdict, against hand computations."""

from __future__ import annotations

import statistics

import pytest

from evals.decide import decisions, metric_decision


def rows_of(values: dict[tuple[str, int], list[float]], metric: str = "acc") -> list[dict]:
    """{(dataset, seed): value per step 1..n} -> ablation rows."""
    return [
        {"dataset": d, "seed": s, "step": step, "metrics": {metric: v}}
        for (d, s), vs in values.items()
        for step, v in enumerate(vs, 1)
    ]


def test_a_clear_gap_is_decided_with_the_signal_and_noise_by_hand() -> None:
    values = {
        ("a", 0): [0.30, 0.40, 0.41, 0.42],
        ("a", 1): [0.31, 0.40, 0.42, 0.43],
        ("b", 0): [0.30, 0.30, 0.31, 0.30],
    }
    values[("b", 1)] = [0.29, 0.31, 0.30, 0.31]
    d = metric_decision(rows_of(values), "acc", window=3)
    score_a, score_b = (0.42 + 0.43) / 2, (0.30 + 0.31) / 2
    assert d["scores"] == pytest.approx({"a": score_a, "b": score_b})
    mean = (score_a + score_b) / 2
    assert d["signal"] == pytest.approx((score_a - score_b) / mean)
    ckpt = statistics.fmean(
        [statistics.pstdev(v[-3:]) for v in (values["a", 0], values["a", 1], values["b", 0], values["b", 1])]
    )
    assert d["noise"] == pytest.approx(ckpt / mean)
    assert d["snr"] == pytest.approx(d["signal"] / d["noise"])
    (pair,) = d["pairs"]
    assert pair["better"] == "a" and pair["seed_agreement"] == 1.0 and pair["checkpoint_agreement"] == 1.0
    assert d["ranking"] == ["a", "b"] and d["verdict"] == "decided"


def test_overlapping_seeds_are_not_decided() -> None:
    values = {("a", 0): [0.30, 0.33], ("a", 1): [0.30, 0.27], ("b", 0): [0.30, 0.31], ("b", 1): [0.30, 0.28]}
    d = metric_decision(rows_of(values), "acc", window=2)
    (pair,) = d["pairs"]  # a = 0.30, b = 0.295: a ahead; seed pairs (0.33 vs .31/.28, 0.27 vs .31/.28): 2 of 4 agree
    assert pair["better"] == "a" and pair["seed_agreement"] == 0.5
    assert d["verdict"] == "not decided at this scale"


def test_bits_per_byte_ranks_lower_first_and_checkpoint_averaging() -> None:
    values = {("a", 0): [2.0, 1.5, 1.0], ("b", 0): [2.0, 1.8, 1.7]}
    d = metric_decision(rows_of(values, "bpb"), "bpb", window=2, average=2)
    assert d["scores"] == pytest.approx({"a": 1.25, "b": 1.75})
    assert d["ranking"] == ["a", "b"] and d["pairs"][0]["better"] == "a"
    assert list(decisions(rows_of(values, "bpb"))) == ["bpb"]
