"""Peak host memory of building a sharded model: the meta-device build against the full model's bytes.

    python -m bench.meta_init_rss                    # 1B preset, 4 CPU ranks, FSDP (dp_shard 4)
    python -m bench.meta_init_rss --model 7B --nproc 8 --dp-shard 4 --tp 2

Each rank builds the engine's model exactly as training does (meta -> TP / FSDP -> to_empty ->
per-shard init, `trainer.materialize`), then reports its peak RSS (`ru_maxrss`) and the RSS it had
before building (Python, torch, the process group). Rank 0's peak is compared with the bytes of the
full fp32 model, which is what every rank held before sharding under the old full-model path. The
peer (that old path) is not run by default: at 4 ranks it needs 4 full copies in memory, the very
thing this removes; `--peer` runs it on one rank for the side-by-side figure.
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

REPO = Path(__file__).resolve().parents[1]


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def worker(args: argparse.Namespace) -> None:
    from trainer.distributed import init_distributed, shutdown
    from trainer.materialize import build_sharded
    from trainer.mesh import ParallelDims
    from trainer.model import Transformer
    from trainer.parallelize import parallelize

    cfg = get_preset(args.model).with_vocab(args.vocab)
    info = init_distributed("cpu", ParallelDims(dp_shard=args.dp_shard, tp=args.tp))
    before = _rss_gib()
    if args.peer:  # the old path: the whole model on every rank, then sharded
        torch.manual_seed(0)
        model = parallelize(Transformer(cfg), info.mesh, param_dtype=None)
    else:
        model = build_sharded(cfg, lambda m: parallelize(m, info.mesh, param_dtype=None), info.device, seed=0)
    peak = _rss_gib()
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    if info.is_main:
        full = cfg.num_params() * 4 / 2**30
        record = {
            "model": args.model,
            "path": "full-model (peer)" if args.peer else "meta",
            "ranks": info.world_size,
            "full_fp32_gib": round(full, 3),
            "local_params_gib": round(local * 4 / 2**30, 3),
            "rss_before_build_gib": round(before, 3),
            "peak_rss_gib": round(peak, 3),
            "peak_over_full": round(peak / full, 3),
        }
        print(json.dumps(record), flush=True)
    shutdown(info)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="1B")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--dp-shard", type=int, default=-1)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--peer", action="store_true", help="also run the old full-model build on one rank")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["--model", args.model, "--vocab", str(args.vocab), "--worker"]
    runs = [(args.nproc, ["--dp-shard", str(args.dp_shard), "--tp", str(args.tp)])]
    if args.peer:
        runs.append((1, ["--peer"]))
    for nproc, extra in runs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        subprocess.run([*cmd, "-m", "bench.meta_init_rss", *common, *extra], cwd=REPO, env=env, check=True)


if __name__ == "__main__":
    main()
