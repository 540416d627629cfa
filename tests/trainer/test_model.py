"""The model against independent formulas, and its HF export against `transformers`."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.config import PRESETS, ModelConfig, get_preset
from trainer.export_hf import export_hf
from trainer.metrics import flops_per_token
from trainer.model import Attention, Transformer, apply_rope, lm_loss, rope_cos_sin

TINY = get_preset("tiny").with_vocab(100)


@pytest.mark.parametrize("variant", [{}, {"qk_norm": True}, {"tie_embeddings": False}])
def test_param_count_formula_matches_the_module(variant: dict) -> None:
    cfg = replace(TINY, **variant)
    model = Transformer(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params()


@pytest.mark.parametrize("name", ["125M", "350M", "1B", "7B"])
def test_presets_have_their_advertised_size(name: str) -> None:
    cfg = PRESETS[name].with_vocab(32000 if name == "7B" else 50257)
    expected = {"125M": 125e6, "350M": 350e6, "1B": 1.0e9, "7B": 6.7e9}[name]
    counted = cfg.num_params() if name != "1B" else cfg.num_params(include_embedding=False)
    assert abs(counted - expected) / expected < 0.08
    with torch.device("meta"):
        assert sum(p.numel() for p in Transformer(cfg).parameters()) == cfg.num_params()


def test_future_tokens_do_not_change_past_logits() -> None:
    torch.manual_seed(0)
    model = Transformer(TINY).eval()
    x = torch.randint(0, 100, (2, 16))
    y = x.clone()
    y[:, 10:] = torch.randint(0, 100, (2, 6))
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_grouped_query_attention_equals_explicit_softmax_with_repeated_kv() -> None:
    torch.manual_seed(0)
    cfg = replace(TINY, n_heads=4, n_kv_heads=2)
    attn = Attention(cfg)
    x = torch.randn(2, 12, cfg.dim)
    cos, sin = rope_cos_sin(cfg.head_dim, 12, cfg.rope_theta)
    b, t, hd = 2, 12, cfg.head_dim
    q = apply_rope(attn.wq(x).view(b, t, 4, hd).transpose(1, 2), cos, sin)
    k = apply_rope(attn.wk(x).view(b, t, 2, hd).transpose(1, 2), cos, sin).repeat_interleave(2, dim=1)
    v = attn.wv(x).view(b, t, 2, hd).transpose(1, 2).repeat_interleave(2, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    expected = attn.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))
    torch.testing.assert_close(attn(x, cos, sin), expected, atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_only_on_relative_position() -> None:
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    cos, sin = rope_cos_sin(16, 64, 10000.0)

    def score(i: int, j: int) -> float:
        qi = apply_rope(q, cos[i : i + 1], sin[i : i + 1])
        kj = apply_rope(k, cos[j : j + 1], sin[j : j + 1])
        return float((qi * kj).sum())

    assert score(5, 2) == pytest.approx(score(40, 37), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


def test_initial_loss_is_near_uniform_and_z_loss_adds_logsumexp_squared() -> None:
    torch.manual_seed(0)
    model = Transformer(TINY)
    x = torch.randint(0, 100, (4, 32))
    logits = model(x[:, :-1])
    ce = lm_loss(logits, x[:, 1:])
    assert abs(ce.item() - math.log(TINY.vocab_size)) < 0.1
    lse = torch.logsumexp(logits.float(), -1)
    expected = ce + 1e-2 * (lse**2).mean()
    torch.testing.assert_close(lm_loss(logits, x[:, 1:], z_loss=1e-2), expected)


def test_residual_projections_have_scaled_init() -> None:
    torch.manual_seed(0)
    cfg = replace(get_preset("tiny"), dim=256, ffn_dim=512, n_layers=8, vocab_size=128)
    model = Transformer(cfg)
    wq = model.layers[0].attention.wq.weight.std().item()
    wo = model.layers[0].attention.wo.weight.std().item()
    assert wq == pytest.approx(0.02, rel=0.05)
    assert wo == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_flops_per_token_is_6n_plus_attention() -> None:
    cfg = TINY
    matmul = cfg.num_params(include_embedding=False) + cfg.vocab_size * cfg.dim  # tied head counted once
    assert flops_per_token(cfg, 128) == 6 * matmul + 12 * cfg.n_layers * cfg.dim * 128


@pytest.mark.parametrize(
    ("variant", "arch"),
    [({}, "LlamaForCausalLM"), ({"qk_norm": True, "tie_embeddings": False}, "Qwen3ForCausalLM")],
)
def test_hf_export_loads_in_transformers_with_matching_logits(tmp_path: Path, variant: dict, arch: str) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = replace(TINY, **variant)
    ours = Transformer(cfg).eval()
    with torch.no_grad():  # move the norm gains off 1 so a missing or misnamed norm would show
        for name, p in ours.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.1)
    assert exported_logits_diff(transformers, ours, cfg, tmp_path, arch) < 1e-5


def exported_logits_diff(transformers: Any, ours: Transformer, cfg: ModelConfig, out: Path, arch: str) -> float:
    """Export `ours`, load it with `transformers` as `arch`, return max |logits diff| on random tokens."""
    export_hf(ours.state_dict(), cfg, out, eos_id=0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == arch
    x = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (hf(x).logits - ours(x)).abs().max().item()
    print(f"HF export {arch}: max|logits diff| {diff:.3g}")
    return diff
