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


# --- layouts: memory per GPU by hand, for 7B and 70B on nodes of 8 x H100 at sequence length 4096 ---


def _llama(dim: int, layers: int, heads: int, kv: int, ffn: int, vocab: int = 32000) -> tuple[int, int]:
    """(parameters of one block, of the whole untied model), counted by hand from the shapes."""
    head_dim = dim // heads
    block = dim * heads * head_dim * 2 + dim * kv * head_dim * 2 + 3 * dim * ffn + 2 * dim
    return block, layers * block + dim + 2 * vocab * dim


@pytest.mark.parametrize(
    ("model", "gpus", "tp", "shape"),
    [("7B", 64, 1, (4096, 32, 32, 32, 11008)), ("70B", 256, 4, (8192, 80, 64, 8, 28672))],
)
def test_layout_memory_matches_a_hand_computation(model: str, gpus: int, tp: int, shape: tuple) -> None:
    from trainer.layouts import Layout, estimate
    from trainer.plan import SHAPES

    cfg = SHAPES[model].with_vocab(32000)
    block, total = _llama(*shape)
    assert cfg.num_params() == total  # 6.74e9 and 6.90e10: Llama-2-7B and -70B
    dim, layers, heads = shape[0], shape[1], shape[2]
    s, b, shard = 4096, 2, gpus // tp
    lt = Layout(dp_replicate=1, dp_shard=shard, tp=tp, pp=1, ac="selective", micro_batch=b, grad_accum=8)
    e = estimate(cfg, lt, s, "h100")
    assert e.params_bytes == pytest.approx(4 * total / (tp * shard))  # fp32 master shard
    assert e.grads_bytes == pytest.approx(4 * total / (tp * shard))
    assert e.optimizer_bytes == pytest.approx(8 * total / (tp * shard))  # Adam m, v
    root = 2 * 32000 * dim  # embedding + head: the root group, unsharded through the step
    assert e.in_flight_bytes == pytest.approx((2 * 2 + 2) * block / tp + 2 * 2 * root / tp)  # bf16
    assert e.activations_bytes == pytest.approx(layers * s * b * dim * 34 / tp)  # Korthikanti, selective
    assert e.logits_bytes == pytest.approx(8 * s * b * 32000 / tp)
    none = estimate(cfg, Layout(1, shard, tp, 1, "none", b, 8), s, "h100")
    assert none.activations_bytes == pytest.approx(layers * s * b * dim * (34 + 5 * heads * s / dim) / tp)
    full = estimate(cfg, Layout(1, shard, tp, 1, "full", b, 8), s, "h100")
    assert full.activations_bytes == pytest.approx(layers * 2 * s * b * dim / tp + s * b * dim * 34 / tp)
    # FSDP traffic: bf16 params gathered twice per micro-batch, fp32 grads reduce-scattered once
    local = total / tp
    assert e.comm_bytes["fsdp"] == pytest.approx((8 * 2 * 2 * local + 4 * local) * (shard - 1) / shard)
    assert e.comm_bytes["tp"] == pytest.approx(8 * layers * 8 * s * b * dim * 2 * (tp - 1) / tp)


@pytest.mark.parametrize(("model", "gpus"), [("7B", 64), ("70B", 256)])
def test_recommended_layout_fits_and_beats_the_rest(model: str, gpus: int) -> None:
    from trainer.layouts import GPU_MEMORY, USABLE_MEMORY, rank_layouts
    from trainer.plan import SHAPES

    cfg = SHAPES[model].with_vocab(32000)
    ranked = rank_layouts(cfg, gpus, "h100", 4096, global_batch=1024)
    best = ranked[0]
    assert best.fits and best.total_bytes <= USABLE_MEMORY * GPU_MEMORY["h100"]
    lt = best.layout
    assert lt.dp_replicate * lt.dp_shard * lt.tp * lt.pp == gpus and lt.tp <= 8
    assert lt.micro_batch * lt.grad_accum * lt.dp_replicate * lt.dp_shard == 1024
    assert all(best.mfu >= e.mfu for e in ranked if e.fits)
    assert any(not e.fits for e in ranked)  # the search does reject layouts (e.g. no AC at micro-batch 8)


def test_70b_needs_sharding_beyond_one_node() -> None:
    from trainer.layouts import Layout, estimate
    from trainer.plan import SHAPES

    cfg = SHAPES["70B"].with_vocab(32000)
    one_node = estimate(cfg, Layout(32, 8, 1, 1, "full", 1, 4), 4096, "h100")
    assert not one_node.fits  # 16 B/param over 8 GPUs: 129 GiB of states each


def test_plan_cli_lists_layouts_and_explains(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--model", "70B", "--vocab", "32000", "--gpus", "256", "--gpu", "h100", "--seq-len", "4096", "--explain"])
    out = capsys.readouterr().out
    for needle in ("Layouts on 256 x H100", "recommended: --dp-replicate", "model states: 16 B/param", "estimated MFU"):
        assert needle in out
    assert "traffic per GPU per step" in out
