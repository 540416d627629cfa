"""Measured peak memory per rank of each layout on CPU, beside the planner's estimate for it.

    python -m bench.layout_memory                      # 125M preset, seq 256, 4 ranks, 2 steps per layout

Each layout runs in its own `torchrun --nproc_per_node=4` (peak RSS only grows within a process):
the engine is built exactly as training builds it, takes two fp32 steps (the second one with
Adam's states allocated), and rank 0 reports its peak RSS less the RSS it had before building (the
interpreter, torch and the process group are not the model's). The planner (`trainer.layouts.estimate`,
fp32 widths) predicts the same quantity; the ratio measured / estimated says how far its arithmetic
is from what the allocator actually holds. One JSON line per layout, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import torch

from common.cli import ArgumentParser
from trainer.config import get_preset
from trainer.layouts import Layout, estimate

REPO = Path(__file__).resolve().parents[1]
# name -> (dp_replicate, dp_shard, tp, pp)
LAYOUTS = {"fsdp4": (1, 4, 1, 1), "hsdp2x2": (2, 2, 1, 1), "fsdp2_tp2": (1, 2, 2, 1), "pp2_fsdp2": (1, 2, 1, 2)}


def _rss_bytes() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def worker(args: argparse.Namespace) -> None:
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.mesh import ParallelDims
    from trainer.optim import OptimConfig

    replicate, shard, tp, pp = LAYOUTS[args.layout]
    cfg = get_preset(args.model, tie_embeddings=False).with_vocab(args.vocab)
    info = init_distributed("cpu", ParallelDims(dp_replicate=replicate, dp_shard=shard, tp=tp, pp=pp))
    accum = max(pp, 1)
    before = _rss_bytes()
    engine = TrainEngine(cfg, info, OptimConfig(), 10, bf16=False, ac=args.ac)
    g = torch.Generator().manual_seed(info.dp_rank)
    for _ in range(2):
        engine.train_step(
            [torch.randint(0, cfg.vocab_size, (args.micro_batch, args.seq_len + 1), generator=g) for _ in range(accum)]
        )
    measured = _rss_bytes() - before
    lt = Layout(replicate, shard, tp, pp, args.ac, args.micro_batch, accum)
    est = estimate(cfg, lt, args.seq_len, "h100", bf16=False)
    if info.is_main:
        print(
            json.dumps(
                {
                    "layout": args.layout,
                    "measured_gib": measured / 2**30,
                    "estimated_gib": est.total_bytes / 2**30,
                    "ratio": measured / est.total_bytes,
                }
            ),
            flush=True,
        )
    shutdown(info)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="125M")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--ac", default="none", choices=["none", "selective", "full"])
    parser.add_argument("--layout", choices=sorted(LAYOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.layout:
        worker(args)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for name in LAYOUTS:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=4",
            "-m",
            "bench.layout_memory",
            "--layout",
            name,
            *sys.argv[1:],
        ]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
        line = next(x for x in proc.stdout.splitlines() if x.startswith("{"))
        print(line, flush=True)
        rows.append(json.loads(line))
    print(f"\n{'layout':>10} {'measured GiB':>13} {'estimated GiB':>14} {'ratio':>6}")
    for r in rows:
        print(f"{r['layout']:>10} {r['measured_gib']:>13.3f} {r['estimated_gib']:>14.3f} {r['ratio']:>6.2f}")


if __name__ == "__main__":
    main()
