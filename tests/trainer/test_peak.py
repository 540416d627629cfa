"""The CPU peak behind MFU: read from the CPU's spec (stable), the timed matmul only as a labelled fallback."""

from __future__ import annotations

import pytest
import torch

from trainer.metrics import cpu_spec_peak, peak_flops

XEON = (
    "model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu avx2 avx512f fma\n"
)
KVM = "model name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2599.998\nflags\t\t: fpu sse2 avx2 fma\n"


def test_spec_peak_is_threads_times_clock_times_flops_per_cycle() -> None:
    label, peak = cpu_spec_peak(XEON, threads=2)  # type: ignore[misc]
    assert peak == pytest.approx(2 * 2.0e9 * 64) and "avx512f" in label and "cpu-spec" in label
    label, peak = cpu_spec_peak(KVM, threads=1)  # type: ignore[misc]
    assert peak == pytest.approx(2.599998e9 * 32) and "avx2" in label
    assert cpu_spec_peak("flags: avx2\n", threads=1) is None  # no clock: the caller falls back to the probe


def test_the_peak_on_this_cpu_is_the_same_every_time() -> None:
    first, second = peak_flops("auto", torch.device("cpu")), peak_flops("cpu", torch.device("cpu"))
    assert first == second
    name, _ = peak_flops("cpu-probe", torch.device("cpu"))
    assert "unstable" in name
    with pytest.raises(KeyError, match="cpu-probe"):
        peak_flops("tpu", torch.device("cpu"))


def test_time_excluded_between_steps_is_not_charged_to_throughput() -> None:
    """An in-training evaluation (here: 0.3 s of other work) between two measurements leaves tokens/s and MFU as
    the steps alone make them, instead of a dip (issue 31: 69.69 tokens/s against ~7,000)."""
    import time

    from trainer.config import ModelConfig
    from trainer.data import EpochPlan
    from trainer.distributed import DistInfo
    from trainer.metrics import Throughput

    plan = EpochPlan(1000, 8, 1, 1, 64)
    info = DistInfo(0, 1, 0, torch.device("cpu"), None, False)  # type: ignore[arg-type]
    meter = Throughput(ModelConfig(64, 2, 2, 2, 128, vocab_size=128), plan, "cpu", info, 0)
    with meter.excluded():
        time.sleep(0.3)
    excluded = meter.measure(1)["tokens_per_s"]
    time.sleep(0.3)  # the same work, not excluded
    charged = meter.measure(2)["tokens_per_s"]
    assert charged < plan.tokens_per_step / 0.3 < excluded
