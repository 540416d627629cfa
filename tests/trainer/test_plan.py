"""The planner's arithmetic against the formulas it claims to use."""

from __future__ import annotations

import pytest

from trainer.config import PRESETS
from trainer.metrics import PEAK_FLOPS
from trainer.plan import derive_shape, main, make_plan

GIB = 2**30


def test_issue_example_compute_time_and_memory() -> None:
    p = make_plan(1e9, 20e9, gpus=64, gpu="h100", mfu=0.4)
    assert p.compute_6nd == pytest.approx(1.2e20)
    assert p.chinchilla_tokens == pytest.approx(20e9)
    attn = 12 * p.shape["n_layers"] * p.shape["dim"] * 2048 * 20e9
    assert p.compute_with_attention == pytest.approx(1.2e20 + attn)
    assert p.wall_seconds == pytest.approx(p.compute_with_attention / (64 * 989e12 * 0.4))
    assert p.gpu_hours == pytest.approx(p.wall_seconds * 64 / 3600)
    assert p.weights_bytes + p.grads_bytes + p.optimizer_bytes == pytest.approx(16e9 / 64)
    assert p.activations_bytes["none"] > p.activations_bytes["selective"] > p.activations_bytes["full"]


def test_sharding_divides_states_but_not_activations() -> None:
    a = make_plan(7e9, None, gpus=8, gpu="h200", mfu=0.4, shape=PRESETS["7B"].with_vocab(32000))
    b = make_plan(7e9, None, gpus=64, gpu="h200", mfu=0.4, shape=PRESETS["7B"].with_vocab(32000))
    assert a.optimizer_bytes == pytest.approx(8 * b.optimizer_bytes)
    assert a.activations_bytes == b.activations_bytes
    assert a.tokens == pytest.approx(140e9)  # default: Chinchilla 20 N
    s, h, layers, heads = 2048, 4096, 32, 32
    assert a.activations_bytes["selective"] == pytest.approx(layers * s * h * 34)
    assert a.activations_bytes["none"] == pytest.approx(layers * s * h * (34 + 5 * heads * s / h))


@pytest.mark.parametrize("n", [1.25e8, 1e9, 7e9, 70e9])
def test_derived_shape_has_about_the_asked_parameters(n: float) -> None:
    cfg = derive_shape(n, 50304)
    assert abs(cfg.num_params(include_embedding=False) - n) / n < 0.25
    assert cfg.n_heads % 2 == 0 and cfg.dim % cfg.n_heads == 0


def test_cli_prints_assumptions_and_results(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--params", "1e9", "--tokens", "20e9", "--gpus", "64", "--gpu", "h100", "--mfu", "0.4"])
    out = capsys.readouterr().out
    for needle in ("Assumptions", "C = 6 x 1e+09 x 2e+10 = 1.2e+20", "Chinchilla", "GPU-hours", "AC full"):
        assert needle in out
    assert set(PEAK_FLOPS) >= {"h100", "h200", "a100"}
