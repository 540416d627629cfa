"""Loss-spike guard: skip an optimizer step whose loss or gradient norm is an outlier, roll back after a run of them.

Long runs die of spikes (seed 003): one bad batch or a numerical blow-up moves the weights far enough that
the loss never comes back. OLMo-core's `SkipStepOptimizer` keeps a rolling window of the last
`rolling_interval_length = 128` losses and gradient norms and declines an update when either is more than
`sigma_factor = 6` standard deviations above the window's mean; with fewer than 64 (half the window)
values it always steps (olmo_core/optim/skip_step_optimizer.py). Those are the defaults here. Two
differences, both on purpose: a non-finite loss or gradient norm is skipped from step 1 (there is
nothing to learn from NaN, and no history is needed to see it), and a skipped step's values do not
enter the window (a 1e4x spike in the window would widen the band and let the next spike through).

A skipped step still consumes its windows and advances the LR schedule: the data position and the
schedule stay functions of the step number, so resume stays exact. After `spike_rollback_after` skips
in a row the run reloads the last checkpoint's weights, optimizer and schedule, keeps the data position
(the windows in between are skipped, as PaLM restarted before a spike and skipped the batches around
it; Chowdhery et al. 2022, section 5.1) and logs that window range. The default 8 is our own choice:
no published recipe fixes it; it is long enough that isolated outliers never trigger it, short enough
that a diverging run stops spending compute within a few log intervals.

The decision reads two host floats per step (a device sync on GPU); `--no-spike-guard` removes it.
"""

from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass
from typing import Any

# Test hook: "STEP:FACTOR[,STEP:FACTOR...]" multiplies the loss of optimizer step STEP (1-based) by
# FACTOR before backward ("nan" gives a NaN loss). Read from the environment so it reaches torchrun ranks.
INJECT_ENV = "CC2MODEL_INJECT_LOSS_SCALE"


@dataclass(frozen=True)
class SpikeConfig:
    """Thresholds of the guard (flags `--spike-guard`, `--spike-window`, `--spike-sigma`, `--spike-rollback-after`)."""

    enabled: bool = True
    window: int = 128  # OLMo-core rolling_interval_length
    sigma: float = 6.0  # OLMo-core sigma_factor
    rollback_after: int = 8  # our choice (see the module docstring); 0: never roll back

    def __post_init__(self) -> None:
        if self.window < 2:
            raise ValueError(f"spike window must be >= 2 steps, got {self.window}")
        if not self.sigma > 0:
            raise ValueError(f"spike sigma must be > 0, got {self.sigma}")
        if self.rollback_after < 0:
            raise ValueError(f"spike rollback-after must be >= 0, got {self.rollback_after}")

    @property
    def min_history(self) -> int:
        """Values the window needs before the sigma rule applies (OLMo-core: half the window)."""
        return max(2, self.window // 2)


@dataclass(frozen=True)
class Spike:
    """Why a step was skipped, with the numbers that decided it."""

    reason: str  # loss_not_finite | grad_norm_not_finite | loss_sigma | grad_norm_sigma
    loss: float
    grad_norm: float
    threshold: float | None  # mean + sigma * std of the signal that tripped, for the sigma rules

    def record(self, step: int) -> dict[str, Any]:
        """The `metrics.jsonl` line (non-finite numbers as strings: JSON has no NaN)."""
        return {
            "step": step,
            "spike": self.reason,
            "spike_loss": _json_float(self.loss),
            "spike_grad_norm": _json_float(self.grad_norm),
            "spike_threshold": self.threshold,
        }


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _mean_std(values: deque[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (Bessel-corrected, as torch.std_mean in OLMo-core)."""
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var)


class SpikeGuard:
    """Rolling statistics of accepted steps and the skip / rollback decisions.

    Every rank feeds it the same all-reduced loss and the same global gradient norm, so every rank
    decides the same way without talking to the others.
    """

    def __init__(self, cfg: SpikeConfig) -> None:
        self.cfg = cfg
        self.losses: deque[float] = deque(maxlen=cfg.window)
        self.grad_norms: deque[float] = deque(maxlen=cfg.window)
        self.in_a_row = 0

    def check(self, loss: float, grad_norm: float) -> Spike | None:
        """None to apply the step (and remember its values); a `Spike` to skip it."""
        spike = self._judge(loss, grad_norm)
        if spike is None:
            self.losses.append(loss)
            self.grad_norms.append(grad_norm)
            self.in_a_row = 0
        else:
            self.in_a_row += 1
        return spike

    def _judge(self, loss: float, grad_norm: float) -> Spike | None:
        if not math.isfinite(loss):
            return Spike("loss_not_finite", loss, grad_norm, None)
        if not math.isfinite(grad_norm):
            return Spike("grad_norm_not_finite", loss, grad_norm, None)
        if len(self.losses) < self.cfg.min_history:
            return None
        signals = (("loss_sigma", loss, self.losses), ("grad_norm_sigma", grad_norm, self.grad_norms))
        for reason, value, history in signals:
            mean, std = _mean_std(history)
            threshold = mean + self.cfg.sigma * std
            if value > threshold:
                return Spike(reason, loss, grad_norm, threshold)
        return None

    @property
    def should_roll_back(self) -> bool:
        return self.cfg.rollback_after > 0 and self.in_a_row >= self.cfg.rollback_after

    def state_dict(self) -> dict[str, Any]:
        """JSON-able: stored in the checkpoint's trainer_state.json so a resume decides as the run would have."""
        return {"losses": list(self.losses), "grad_norms": list(self.grad_norms), "in_a_row": self.in_a_row}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses = deque(state["losses"], maxlen=self.cfg.window)
        self.grad_norms = deque(state["grad_norms"], maxlen=self.cfg.window)
        self.in_a_row = int(state["in_a_row"])


def injected_loss_scales(env: dict[str, str] | None = None) -> dict[int, float]:
    """{step: factor} from `CC2MODEL_INJECT_LOSS_SCALE` (tests only); empty when unset."""
    spec = (os.environ if env is None else env).get(INJECT_ENV, "").strip()
    scales: dict[int, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        try:
            step, factor = item.split(":")
            scales[int(step)] = float(factor)
        except ValueError:
            raise ValueError(f"{INJECT_ENV}: expected STEP:FACTOR[,STEP:FACTOR...], got {item!r}") from None
    return scales
