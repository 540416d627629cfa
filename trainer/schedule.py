"""Learning-rate schedules: linear warmup, then cosine (or warmup-stable-decay) down to 10 % of peak."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch.optim.lr_scheduler import LambdaLR

ScheduleKind = Literal["cosine", "wsd"]


def lr_factor(
    step: int,
    total_steps: int,
    warmup_steps: int,
    kind: ScheduleKind = "cosine",
    min_ratio: float = 0.1,
    decay_fraction: float = 0.2,
) -> float:
    """Multiplier of the peak LR for the update at 0-based `step` of `total_steps`.

    warmup: (step+1)/warmup, so the first update is not at LR 0.
    cosine: min + (1-min) * (1 + cos(pi * progress)) / 2, progress 0 -> 1 over the remaining steps.
    wsd: flat at peak, then linear to min over the last `decay_fraction` of the steps.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "cosine":
        span = max(1, total_steps - warmup_steps - 1)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if kind == "wsd":
        decay_steps = max(1, round(decay_fraction * (total_steps - warmup_steps)))
        decay_start = total_steps - decay_steps
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start + 1) / decay_steps)
        return 1.0 - (1 - min_ratio) * progress
    raise ValueError(f"unknown schedule {kind!r}")


def default_warmup(total_steps: int) -> int:
    """The recipe's 2000 steps, capped at 5 % of the run so short runs still decay."""
    return max(1, min(2000, math.ceil(0.05 * total_steps)))


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int,
    kind: ScheduleKind = "cosine",
    min_ratio: float = 0.1,
    decay_fraction: float = 0.2,
) -> LambdaLR:
    """A LambdaLR over `lr_factor` (its state is the step count, which checkpoints carry)."""
    return LambdaLR(
        optimizer,
        lambda s: lr_factor(s, total_steps, warmup_steps, kind, min_ratio, decay_fraction),
    )
