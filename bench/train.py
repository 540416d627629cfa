"""Training throughput: our FSDP2 trainer step against a plain single-process PyTorch loop.

    python -m bench.train --compare --repeats 3          # CPU: plain vs ours at 1 and 2 ranks
    torchrun --nproc_per_node=8 -m bench.train --mode ours --device cuda --model 1B --compile --ac selective

`--mode plain` is a nanoGPT-style loop (same model, AdamW, clip; no FSDP, no process group).
`--mode ours` times `trainer.engine.TrainEngine.train_step` (FSDP2 over the torchrun group, or
one in-process rank). `--mode ab` runs both in one process, alternating steps, so both see the
same machine load. Batches are random tokens: this measures the training step, not the disk.
Each run prints one JSON line; `--compare` runs each setting `--repeats` times in fresh processes
and reports medians and ratios. Run it as a module from the repository root (`python -m bench.train`,
`torchrun ... -m bench.train`), as every bench.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from common.cli import ArgumentParser
from trainer.config import ModelConfig, get_preset
from trainer.metrics import flops_per_token, peak_flops, peak_memory_gib
from trainer.model import Transformer, lm_loss

REPO = Path(__file__).resolve().parents[1]

# Small enough for 2 shared CPU cores, large enough that matmuls (not Python overhead) dominate.
CPU_BENCH_MODEL = ModelConfig(
    dim=256, n_layers=4, n_heads=4, n_kv_heads=4, ffn_dim=688, vocab_size=4096, max_seq_len=256
)


def model_config(name: str, seq_len: int, vocab: int) -> ModelConfig:
    if name == "cpu-bench":
        return replace(CPU_BENCH_MODEL, max_seq_len=max(seq_len, CPU_BENCH_MODEL.max_seq_len))
    cfg = get_preset(name).with_vocab(vocab)
    return replace(cfg, max_seq_len=max(seq_len, cfg.max_seq_len))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(cfg: ModelConfig, args: argparse.Namespace, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, cfg.vocab_size, (args.micro_batch, args.seq_len + 1), generator=g) for _ in range(4)]


def plain_stepper(cfg: ModelConfig, device: torch.device, bf16: bool) -> Callable[[torch.Tensor], float]:
    """The reference: a nanoGPT-style step (autocast bf16 on request, AdamW, clip), no process group."""
    torch.manual_seed(0)
    with torch.device(device):
        model = Transformer(cfg)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        fused=device.type == "cuda",
    )

    def step(batch: torch.Tensor) -> float:
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch[:, :-1])
        loss = lm_loss(logits, batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def ours_stepper(cfg: ModelConfig, info: object, args: argparse.Namespace) -> Callable[[torch.Tensor], float]:
    """Our engine's step: FSDP2 (+ optional AC and compile) over the current process group."""
    from trainer.engine import TrainEngine
    from trainer.optim import OptimConfig

    engine = TrainEngine(
        cfg, info, OptimConfig(warmup_steps=10), 10_000, bf16=args.bf16, ac=args.ac, compile=args.compile
    )
    return lambda batch: float(engine.train_step([batch]).loss)


def _time_steps(
    steppers: list[Callable[[torch.Tensor], float]],
    batches: list[torch.Tensor],
    args: argparse.Namespace,
    device: torch.device,
) -> list[list[float]]:
    """Step each stepper in turn (interleaved, so machine load hits all alike); times after warmup."""
    times: list[list[float]] = [[] for _ in steppers]
    for i in range(args.warmup + args.steps):
        for k, step in enumerate(steppers):
            t0 = time.perf_counter()
            step(batches[i % len(batches)])
            _sync(device)
            if i >= args.warmup:
                times[k].append(time.perf_counter() - t0)
    return times


def run_plain(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    cfg = model_config(args.model, args.seq_len, args.vocab)
    (times,) = _time_steps([plain_stepper(cfg, device, args.bf16)], _batches(cfg, args, 0), args, device)
    return _report(args, cfg, device, times, world=1)


def run_ours(args: argparse.Namespace) -> dict:
    from trainer.distributed import init_distributed, shutdown

    info = init_distributed(args.device)
    cfg = model_config(args.model, args.seq_len, args.vocab)
    stepper = ours_stepper(cfg, info, args)
    (times,) = _time_steps([stepper], _batches(cfg, args, info.rank), args, info.device)
    result = _report(args, cfg, info.device, times, world=info.world_size)
    shutdown(info)
    return result if info.is_main else {}


def run_ab(args: argparse.Namespace) -> dict:
    """ours (one in-process rank) and plain in the same process, stepped alternately."""
    from trainer.distributed import init_distributed, shutdown

    info = init_distributed(args.device)
    cfg = model_config(args.model, args.seq_len, args.vocab)
    steppers = [plain_stepper(cfg, info.device, args.bf16), ours_stepper(cfg, info, args)]
    plain_t, ours_t = _time_steps(steppers, _batches(cfg, args, 0), args, info.device)
    shutdown(info)
    return {
        "plain": _report(args, cfg, info.device, plain_t, world=1, mode="plain"),
        "ours": _report(args, cfg, info.device, ours_t, world=1, mode="ours"),
        "ratio_ours_vs_plain": statistics.median(p / o for p, o in zip(plain_t, ours_t, strict=True)),
    }


def _report(
    args: argparse.Namespace, cfg: ModelConfig, device: torch.device, times: list[float], world: int, mode: str = ""
) -> dict:
    step_s = statistics.median(times)
    tokens_per_s = world * args.micro_batch * args.seq_len / step_s
    name, peak = peak_flops(args.gpu, device)
    return {
        "mode": mode or args.mode,
        "ranks": world,
        "threads_per_rank": torch.get_num_threads(),
        "device": str(device),
        "model": args.model,
        "params": cfg.num_params(),
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "bf16": args.bf16,
        "compile": args.compile,
        "ac": args.ac,
        "step_s_median": step_s,
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * flops_per_token(cfg, args.seq_len) / (peak * world),
        "peak": name,
        "peak_mem_gib": peak_memory_gib(device),
    }


def _run_child(flags: list[str], ranks: int, threads: int) -> dict:
    """One measurement in a fresh process (torchrun for several ranks), this module run from the repo root."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    launcher = [] if ranks == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    cmd = [sys.executable, *launcher, "-m", "bench.train", *flags]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def compare(args: argparse.Namespace) -> dict:
    """CPU: ours vs plain at 1 rank (interleaved in one process, 1 thread and all cores) and ours at
    2 ranks (torchrun, cores split) vs plain in its own process, each repeated in fresh processes.

    On a machine shared with other jobs, separate-process timings swing by 2x; the interleaved
    A/B sees the same load on both sides, so its ratio is the one to trust.
    """
    cores = args.cores or os.cpu_count() or 1
    half = max(1, cores // 2)
    common = ["--model", args.model, "--seq-len", str(args.seq_len), "--micro-batch", str(args.micro_batch)]
    common += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--device", "cpu"]
    ab: dict[int, list[dict]] = {1: [], cores: []}
    two: dict[str, list[float]] = {f"ours_2rank_{half}thr": [], f"plain_1rank_{cores}thr": []}
    for _ in range(args.repeats):
        for threads in ab:
            ab[threads].append(_run_child(["--mode", "ab", *common], 1, threads))
        two[f"ours_2rank_{half}thr"].append(_run_child(["--mode", "ours", *common], 2, half)["tokens_per_s"])
        two[f"plain_1rank_{cores}thr"].append(_run_child(["--mode", "plain", *common], 1, cores)["tokens_per_s"])
    summary: dict[str, object] = {"cores": cores, "repeats": args.repeats}
    for threads, runs in ab.items():
        summary[f"1rank_{threads}thr"] = {
            "plain_tokens_per_s": [r["plain"]["tokens_per_s"] for r in runs],
            "ours_tokens_per_s": [r["ours"]["tokens_per_s"] for r in runs],
            "ratio_ours_vs_plain_runs": [r["ratio_ours_vs_plain"] for r in runs],
            "ratio_ours_vs_plain_median": statistics.median(r["ratio_ours_vs_plain"] for r in runs),
        }
    ours2, plain = two.values()
    summary["2rank"] = {
        **two,
        "ratio_ours_2rank_vs_plain_median": statistics.median(o / p for o, p in zip(ours2, plain, strict=True)),
    }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["plain", "ours", "ab"], default="ours", help="ab: both, interleaved")
    parser.add_argument("--compare", action="store_true", help="CPU: plain vs ours at 1 and 2 ranks")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=0, help="CPU cores to split between ranks (default: all)")
    parser.add_argument("--model", default="cpu-bench", help="cpu-bench or a trainer preset (tiny, 125M, 1B, ...)")
    parser.add_argument("--vocab", type=int, default=50304, help="vocab for presets")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="default: on CUDA")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--ac", choices=["none", "selective", "full"], default="none")
    parser.add_argument("--gpu", default="auto", help="peak table entry for MFU (h100, h200, a100, cpu)")
    args = parser.parse_args(argv)
    if args.bf16 is None:
        args.bf16 = args.device == "cuda"
    if args.compare:
        print(json.dumps(compare(args), indent=1))
        return
    result = {"plain": run_plain, "ours": run_ours, "ab": run_ab}[args.mode](args)
    if result:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
