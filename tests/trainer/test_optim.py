"""The recipe: AdamW (0.9, 0.95), decay on matrices only, warmup then cosine/WSD to 10 % of peak."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config import get_preset
from trainer.model import Transformer
from trainer.optim import build_optimizer, param_groups
from trainer.schedule import build_scheduler, default_warmup, lr_factor


def test_warmup_is_linear_and_reaches_peak() -> None:
    assert [lr_factor(s, 100, 4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 100, 4) == pytest.approx(1.0)


def test_cosine_decays_monotonically_to_ten_percent() -> None:
    f = [lr_factor(s, 100, 10) for s in range(100)]
    after = f[10:]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))
    assert f[-1] == pytest.approx(0.1)
    mid = 10 + (100 - 10 - 1) / 2
    assert lr_factor(int(mid), 100, 10) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 44 / 89)))


def test_wsd_is_flat_then_linear_to_ten_percent() -> None:
    f = [lr_factor(s, 100, 10, kind="wsd", decay_fraction=0.2) for s in range(100)]
    decay_start = 100 - 18
    assert all(x == 1.0 for x in f[10:decay_start])
    assert f[-1] == pytest.approx(0.1)
    steps = [a - b for a, b in zip(f[decay_start:], f[decay_start + 1 :], strict=False)]
    assert max(steps) - min(steps) < 1e-9  # linear


def test_default_warmup_is_2000_capped_at_5_percent() -> None:
    assert default_warmup(1_000_000) == 2000
    assert default_warmup(100) == 5
    assert default_warmup(3) == 1


def test_weight_decay_only_on_matrices_and_recipe_betas() -> None:
    model = Transformer(get_preset("tiny", qk_norm=True).with_vocab(64))
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    opt = build_optimizer(model, lr=1e-3)
    assert opt.defaults["betas"] == (0.9, 0.95)


def test_scheduler_state_round_trips() -> None:
    model = Transformer(get_preset("tiny").with_vocab(64))
    opt = build_optimizer(model, lr=1e-3)
    sched = build_scheduler(opt, 50, 5)
    for _ in range(7):
        opt.step()
        sched.step()
    state = sched.state_dict()
    opt2 = build_optimizer(model, lr=1e-3)
    sched2 = build_scheduler(opt2, 50, 5)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert sched.get_last_lr()[0] == pytest.approx(1e-3 * lr_factor(7, 50, 5))
    assert isinstance(opt, torch.optim.AdamW)
