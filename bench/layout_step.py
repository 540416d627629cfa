"""One layout's training step, timed: tokens/s, MFU and peak memory, beside the planner's estimate.

    torchrun --nproc_per_node=8 -m bench.layout_step --model 1B --dp-shard 4 --tp 2 --bf16 --seq-len 2048
    torchrun --nproc_per_node=4 -m bench.layout_step --model tiny --pp 2 --dp-shard 2 --grad-accum 4   # CPU

`bash bench/gpu_mfu.sh` runs it for every layout the visible GPUs allow. The step is
`trainer.engine.TrainEngine.train_step` (the one training runs) on random tokens, after warm-up
steps; tokens per step count each data-parallel replica once (TP / PP / CP ranks share tokens).
MFU = tokens/s x (6 N + 12 L d T) / (ranks x peak). One JSON line from rank 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import torch

from common.cli import ArgumentParser
from trainer.config import get_preset
from trainer.layouts import Layout, estimate
from trainer.metrics import flops_per_token, peak_flops, peak_memory_gib


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=0, help="default: pp (the fewest a pipeline runs)")
    for name in ("dp-replicate", "tp", "pp", "cp"):
        parser.add_argument(f"--{name}", type=int, default=1)
    parser.add_argument("--dp-shard", type=int, default=-1)
    parser.add_argument("--pp-schedule", default="1F1B")
    parser.add_argument("--ac", default="none", choices=["none", "selective", "full"])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--gpu", default="auto")
    args = parser.parse_args()

    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.mesh import ParallelDims
    from trainer.optim import OptimConfig

    dims = ParallelDims(dp_replicate=args.dp_replicate, dp_shard=args.dp_shard, tp=args.tp, pp=args.pp, cp=args.cp)
    info = init_distributed(args.device, dims)
    untied = args.pp > 1 or None
    cfg = get_preset(args.model, tie_embeddings=False if untied else None).with_vocab(args.vocab)
    if args.cp > 1:  # the ring attention kernels take no GQA (trainer/context_parallel.py)
        cfg = replace(cfg, n_kv_heads=cfg.n_heads)
    accum = args.grad_accum or args.pp
    engine = TrainEngine(
        cfg, info, OptimConfig(), 10_000, bf16=args.bf16, ac=args.ac, compile=args.compile, pp_schedule=args.pp_schedule
    )
    g = torch.Generator().manual_seed(info.dp_rank)
    shape = (args.micro_batch, args.seq_len + 1)
    batches = [torch.randint(0, cfg.vocab_size, shape, generator=g) for _ in range(accum)]
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        float(engine.train_step(batches).loss)  # .item() syncs the device
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    tokens_per_s = info.dp_size * accum * args.micro_batch * args.seq_len / step_s
    name, peak = peak_flops(args.gpu, info.device)
    d = info.dims
    layout = Layout(d.dp_replicate, d.dp_shard, d.tp, d.pp, args.ac, args.micro_batch, accum)
    planned = estimate(cfg, layout, args.seq_len, name if name != "cpu" else "h100", bf16=args.bf16)
    measured = peak_memory_gib(info.device)
    if info.is_main:
        record = {
            "model": args.model,
            "layout": layout.flags + (f" --cp {d.cp}" if d.cp > 1 else ""),
            "ranks": info.world_size,
            "compile": args.compile,
            "bf16": args.bf16,
            "step_s_median": step_s,
            "tokens_per_s": tokens_per_s,
            "mfu": tokens_per_s * flops_per_token(cfg, args.seq_len) / (peak * info.world_size),
            # the planner knows GPUs' peaks and links, not CP (its figures are for cp 1)
            "planner_mfu": planned.mfu if name != "cpu" and d.cp == 1 else None,
            "peak": name,
            "peak_mem_gib": measured,
            "planner_mem_gib": planned.total_bytes / 2**30 if d.cp == 1 else None,
        }
        print(json.dumps(record), flush=True)
    shutdown(info)


if __name__ == "__main__":
    main()
