"""What a run records about itself: throughput (FLOPs per token, MFU against a peak table), the
JSONL/stdout metrics logger, and the per-rank data-index trail.

MFU needs a peak that does not move between runs: datasheet figures for GPUs, and for CPUs the
spec figure cores x clock x FLOPs/cycle read from /proc/cpuinfo (a timed matmul is the labelled fallback).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import torch

from common.atomic import atomic_write_text
from trainer.config import ModelConfig
from trainer.data import EpochPlan
from trainer.distributed import DistInfo

log = logging.getLogger(__name__)

# Dense bf16 tensor-core peaks from the vendors' datasheets (no sparsity), FLOP/s.
PEAK_FLOPS: dict[str, float] = {
    "h100": 989e12,  # H100 SXM
    "h200": 989e12,  # H200 SXM: same compute die as H100, more and faster HBM
    "a100": 312e12,  # A100 SXM
}


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6 N (matmul params, fwd + bwd) + 12 L d T (attention scores and values).

    N counts every weight that is a matmul: all but the input embedding lookup (with tied embeddings
    the shared matrix is counted once, as the output head); of a MoE layer the router and the top_k
    experts a token runs through (the active parameters), not all E. The attention term is the PaLM/torchtitan
    convention (no discount for the causal mask), so MFU is comparable with theirs.
    """
    matmul_params = cfg.active_params(include_embedding=False)
    if cfg.tie_embeddings:
        matmul_params += cfg.vocab_size * cfg.dim
    return 6 * matmul_params + 12 * cfg.n_layers * cfg.dim * seq_len


# fp32 FLOPs per cycle per core by the widest vector ISA the CPU reports: 2 FMA ports x lanes x 2
# (multiply + add). Intel's server cores (Skylake-SP onwards) have two 512-bit FMA ports; AVX2 cores
# two 256-bit ones (Intel optimization manual, "Peak FLOPs per cycle" tables).
CPU_FLOPS_PER_CYCLE: tuple[tuple[str, int], ...] = (("avx512f", 64), ("avx2", 32), ("sse2", 8))


def measure_cpu_peak(size: int = 512, repeats: int = 8) -> float:
    """Best fp32 matmul FLOP/s this process gets. Noisy on a shared VM (1.9e11 vs 9.1e10 in two runs of
    issue 17): only the fallback when the spec sheet figure cannot be read."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def _cpuinfo_field(text: str, key: str) -> str | None:
    match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def cpu_spec_peak(cpuinfo: str, threads: int) -> tuple[str, float] | None:
    """threads x GHz x FLOPs/cycle from /proc/cpuinfo text: stable across runs, unlike a probe.

    The clock is the model name's rated "@ X.XXGHz" when present, else "cpu MHz" (the TSC rate on a
    VM, the base clock). None when the text gives no clock or no known vector ISA.
    """
    name = _cpuinfo_field(cpuinfo, "model name") or ""
    rated = re.search(r"@\s*([\d.]+)\s*GHz", name)
    mhz = _cpuinfo_field(cpuinfo, "cpu MHz")
    ghz = float(rated.group(1)) if rated else (float(mhz) / 1000 if mhz else None)
    flags = set((_cpuinfo_field(cpuinfo, "flags") or "").split())
    isa = next(((f, per) for f, per in CPU_FLOPS_PER_CYCLE if f in flags), None)
    if not ghz or isa is None:
        return None
    label = f"cpu-spec ({threads} threads x {ghz:.2f} GHz x {isa[1]} fp32 FLOP/cycle, {isa[0]})"
    return label, threads * ghz * 1e9 * isa[1]


def cpu_peak() -> tuple[str, float]:
    """This rank's CPU peak: the spec figure for its threads (at most the cores it may run on), else the probe."""
    threads = min(torch.get_num_threads(), len(os.sched_getaffinity(0)))
    try:
        spec = cpu_spec_peak(Path("/proc/cpuinfo").read_text(), threads)
    except OSError:
        spec = None
    return spec if spec is not None else ("cpu-probe (measured matmul, unstable)", measure_cpu_peak())


def peak_flops(gpu: str, device: torch.device) -> tuple[str, float]:
    """(name, peak FLOP/s per device): the named table entry, autodetected on CUDA; on CPU the spec
    figure (`cpu_spec_peak`), or the probe with `cpu-probe` or where the spec cannot be read."""
    name = gpu.lower()
    if name == "auto":
        if device.type == "cuda":
            product = torch.cuda.get_device_name(device).lower()
            name = next((k for k in PEAK_FLOPS if k in product), "h100")
        else:
            name = "cpu"
    if name == "cpu":
        return cpu_peak()
    if name == "cpu-probe":
        return "cpu-probe (measured matmul, unstable)", measure_cpu_peak()
    if name not in PEAK_FLOPS:
        raise KeyError(f"unknown accelerator {gpu!r}; known: {sorted(PEAK_FLOPS)}, cpu or cpu-probe")
    return name, PEAK_FLOPS[name]


def peak_memory_gib(device: torch.device) -> float:
    """Peak allocated accelerator memory, or this process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss_kib / 2**20


class MetricsLogger:
    """One JSON object per line in `path` and a compact line on stdout; only the main rank writes."""

    def __init__(
        self,
        path: Path | None,
        enabled: bool,
        stream: TextIO = sys.stdout,
        start_step: int | None = None,
        sinks: list[Any] | None = None,
    ) -> None:
        """`start_step`: the step the run starts after (the resumed checkpoint's, 0 for a fresh run); records
        of later steps, which the run is about to log again, are dropped first (atomically). `sinks`
        (`trainer.metric_sinks`) get every record too."""
        self.enabled, self.stream, self.sinks = enabled, stream, sinks or []
        self.file = None
        if enabled and path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if start_step is not None and path.exists():
                keep_records_up_to(path, start_step)
            self.file = path.open("a")

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.file is not None:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        for sink in self.sinks:
            sink.log(record)
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in record.items() if not isinstance(v, dict))  # details: file only
        print(shown, file=self.stream, flush=True)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for sink in self.sinks:
            sink.close()


def keep_records_up_to(path: Path, step: int) -> int:
    """Rewrite `path` (atomically) without the records of steps after `step` and without a line cut by a
    kill; returns how many records were dropped. A resumed run replays those steps, so each is logged once."""
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            dropped += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step:
            dropped += 1
            continue
        kept.append(line + "\n")
    if dropped:
        atomic_write_text(path, "".join(kept))
    return dropped


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class Throughput:
    """tokens/s, MFU and peak memory of the training steps since the previous measurement; time spent between
    steps on other work (an in-training evaluation, a checkpoint) is `excluded`, so it does not read as a dip."""

    def __init__(self, model_cfg: ModelConfig, plan: EpochPlan, gpu: str, info: DistInfo, step: int) -> None:
        self.plan, self.info = plan, info
        self.flops_per_token = flops_per_token(model_cfg, plan.seq_len)
        name, self.peak = peak_flops(gpu, info.device)
        log.info("%.3g FLOPs/token; peak %s = %.3g FLOP/s per device", self.flops_per_token, name, self.peak)
        self.t_last, self.step_last = time.perf_counter(), step

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Work inside this block is not training time: the next measurement does not count it."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.t_last += time.perf_counter() - start

    def measure(self, step: int) -> dict[str, float]:
        now = time.perf_counter()
        tok_s = (step - self.step_last) * self.plan.tokens_per_step / max(now - self.t_last, 1e-9)
        self.t_last, self.step_last = now, step
        return {
            "tokens": step * self.plan.tokens_per_step,
            "tokens_per_s": tok_s,
            "mfu": tok_s * self.flops_per_token / (self.peak * self.info.world_size),
            "peak_mem_gib": peak_memory_gib(self.info.device),
        }


class DataIndexWriter:
    """Which windows each rank trained on at each step (the data order audit trail, as in OLMo)."""

    def __init__(self, root: Path, rank: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.file = (root / f"rank{rank}.jsonl").open("a")

    def write(self, step: int, micro_ids: list[Any]) -> None:
        self.file.write(json.dumps({"step": step, "windows": [[int(w) for w in ids] for ids in micro_ids]}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
