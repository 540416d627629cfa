"""Copy planning, re-hydration weights and spec validation (no data files needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixtures.plan import Demand, InfeasibleMixture, check_feasible, plan_copies
from mixtures.rehydrate import rehydration_weights
from mixtures.spec import EPOCH, SpecError, load_spec, spec_from_dict


@pytest.mark.parametrize("factor", [0.3, 1.0, 2.6, 7.01])
def test_copies_hit_the_request_within_one_document(factor: float) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, size=400)
    requested = int(lengths.sum() * factor)
    copies = plan_copies(lengths, requested, np.random.default_rng(1))
    base = int(np.floor(requested / lengths.sum()))
    assert set(np.unique(copies)) <= {base, base + 1}
    assert abs(int((copies * lengths).sum()) - requested) <= lengths.max()


def test_copies_follow_rehydration_weights() -> None:
    rng = np.random.default_rng(2)
    lengths = rng.integers(10, 3000, size=300)
    weights = rng.integers(0, 4, size=300)
    epoch = int((lengths * weights).sum())
    assert (plan_copies(lengths, epoch * 2, np.random.default_rng(3), weights) == 2 * weights).all()
    half = plan_copies(lengths, epoch // 2, np.random.default_rng(3), weights)
    assert ((half >= np.floor(weights / 2)) & (half <= np.ceil(weights / 2))).all()
    assert abs(int((half * lengths).sum()) - epoch // 2) <= lengths.max()


def test_zero_request_or_empty_source() -> None:
    assert not plan_copies(np.array([5, 6]), 0, np.random.default_rng(0)).any()
    assert plan_copies(np.zeros(0, dtype=np.int64), 10, np.random.default_rng(0)).size == 0


def test_infeasible_demands_are_refused_with_the_numbers() -> None:
    ok = Demand("a", 0.5, 100, 100, 1.0)
    bad = Demand("b", 0.5, 1000, 300, 2.0)
    check_feasible([ok])
    with pytest.raises(InfeasibleMixture) as err:
        check_feasible([ok, bad])
    message = str(err.value)
    assert "b:" in message and "a:" not in message
    assert "1,000" in message and "300" in message and "max_repetition 2" in message and "3.333" in message


def test_rehydration_is_a_step_function() -> None:
    table = {1: 1, 2: 3, 5: 6, 100: 1}
    sizes = np.array([0, 1, 2, 4, 5, 99, 100, 5000])
    assert rehydration_weights(sizes, table).tolist() == [1, 1, 3, 3, 6, 6, 1, 1]


def minimal(**overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "tokenizer": "tok",
        "target_tokens": 1000,
        "seq_len": 128,
        "sources": [
            {"name": "a", "path": "a/*.parquet", "weight": 3},
            {"name": "b", "path": "b", "weight": 1},
        ],
    }
    spec.update(overrides)
    return spec


def test_spec_normalises_weights_and_resolves_paths(tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text(
        "tokenizer: tok\ntarget_tokens: 1_000\nseq_len: 64\nsources:\n"
        "  - {name: a, path: data/a, weight: 3, max_repetition: 2, rehydrate: {1: 1, 3: 2}}\n"
        "  - {name: b, path: /abs/b, weight: 1}\n"
    )
    spec = load_spec(path)
    assert [s.weight for s in spec.sources] == [0.75, 0.25]
    assert spec.target_tokens == 1000 and spec.separator == "append"
    assert spec.sources[0].rehydrate == {1: 1, 3: 2} and spec.sources[0].max_repetition == 2
    assert spec.resolve(spec.sources[0].paths[0]) == str(tmp_path / "data/a")
    assert spec.resolve(spec.sources[1].paths[0]) == "/abs/b"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"target_tokens": -5}, "target_tokens"),
        ({"separator": "middle"}, "separator"),
        ({"colour": "red"}, "unknown spec keys"),
        ({"sources": []}, "non-empty"),
        ({"sources": [{"name": "a", "path": "x", "weight": -1}]}, "weight"),
        ({"sources": [{"name": "a", "path": "x", "weight": 1, "max_repetition": 0}]}, "max_repetition"),
        (
            {"sources": [{"name": "a", "path": "x", "weight": 1}, {"name": "a", "path": "y", "weight": 1}]},
            "unique",
        ),
        ({"sources": [{"name": "a", "path": "x", "weight": 1, "rehydrate": {"big": 2}}]}, "rehydrate"),
    ],
)
def test_spec_errors_name_the_problem(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec_from_dict(minimal(**overrides))


def test_epoch_spec_takes_sources_without_weights() -> None:
    spec = spec_from_dict(
        minimal(
            target_tokens="epoch",
            sources=[{"name": "a", "path": "a"}, {"name": "b", "path": "b", "weight": 1, "max_repetition": 1}],
        )
    )
    assert spec.is_epoch and spec.target_tokens == EPOCH
    assert [(s.weight, s.max_repetition, s.rehydrate) for s in spec.sources] == [(0.5, 1.0, None)] * 2
    assert not spec_from_dict(minimal()).is_epoch


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ({"weight": 3}, "weight 3 has no meaning under `target_tokens: epoch`"),
        ({"max_repetition": 2}, "max_repetition 2 has no meaning"),
        ({"rehydrate": {1: 1, 2: 3}}, "rehydrate has no meaning"),
        ({"weight": "heavy"}, "weight must be a number"),
    ],
)
def test_epoch_spec_refuses_what_would_repeat_or_weigh(source: dict[str, object], needle: str) -> None:
    sources = [{"name": "a", "path": "a", **source}, {"name": "b", "path": "b"}]
    with pytest.raises(SpecError, match=needle) as err:
        spec_from_dict(minimal(target_tokens="epoch", sources=sources))
    assert "\n" not in str(err.value) and str(err.value).startswith("sources[0] (a): ")


@pytest.mark.parametrize("target", ["Epoch", "lots", 0, 2.5])
def test_target_tokens_is_a_count_or_epoch(target: object) -> None:
    with pytest.raises(SpecError, match="`target_tokens` must be a positive integer or `epoch`"):
        spec_from_dict(minimal(target_tokens=target))


def test_example_spec_parses() -> None:
    spec = load_spec(Path(__file__).resolve().parents[2] / "mixtures" / "example.yaml")
    assert [s.name for s in spec.sources] == ["cc-main-2024-10", "older-mixture"]
    assert spec.sources[0].rehydrate == {1: 1, 2: 3, 3: 4, 5: 6, 100: 1}
    assert sum(s.weight for s in spec.sources) == pytest.approx(1.0)
