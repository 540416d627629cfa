"""Training with a checkpoint every N steps: synchronous saves (DCP `save`) against `--async-checkpoint`.

    python -m bench.async_checkpoint --compare --repeats 3          # CPU: sync vs async, fresh processes
    python -m bench.async_checkpoint --mode async --device cuda --model 125M --steps 40 --every 5

Both modes run `trainer.engine.TrainEngine.train_step` on the same random batches (same seed) and save
through `trainer.checkpoint.Checkpointer` (DCP shards, checksums manifest, atomic rename, keep 2); the
clock runs from the first step to the last checkpoint committed (the async run waits for its last
write), so a save that only moved to the end is not counted as a gain. Each run prints one JSON line;
`--compare` alternates the modes `--repeats` times in fresh processes and prints the median steps/s
of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.train import model_config

REPO = Path(__file__).resolve().parents[1]
MODES = ("sync", "async")


def run(args: argparse.Namespace) -> dict[str, float | str]:
    """One timed run in this process (one rank); the checkpoints go to a temporary folder, removed after."""
    from trainer.checkpoint import Checkpointer
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.optim import OptimConfig

    info = init_distributed(args.device)
    cfg = model_config(args.model, args.seq_len, args.vocab)
    engine = TrainEngine(cfg, info, OptimConfig(lr=1e-3, warmup_steps=2), args.steps, seed=0, bf16=args.bf16)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, cfg.vocab_size, (args.micro_batch, args.seq_len + 1), generator=g) for _ in range(4)]
    root = Path(tempfile.mkdtemp(prefix="bench-async-ckpt-", dir=args.scratch))
    try:
        ckpt = Checkpointer(root, keep=2, background=args.mode == "async")
        engine.train_step([batches[0]])  # warm-up step and save (first-use costs), not timed
        ckpt.save(0, engine.model, engine.optimizer, engine.scheduler, {"consumed_samples": 0})
        ckpt.finish()
        start = time.perf_counter()
        for step in range(1, args.steps + 1):
            engine.train_step([batches[step % len(batches)]])
            if step % args.every == 0:
                ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, {"consumed_samples": step})
        ckpt.finish()
        if info.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        size = sum(f.stat().st_size for f in (root / f"step_{args.steps:09d}").iterdir())
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutdown(info)
    return {"mode": args.mode, "steps_per_s": args.steps / elapsed, "seconds": elapsed,
            "checkpoint_mib": size / 2**20, "params_m": cfg.num_params() / 1e6}  # fmt: skip


def compare(args: argparse.Namespace, passthrough: list[str]) -> None:
    """Fresh processes, the modes alternated so both see the same machine load; medians and the ratio."""
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            cmd = [sys.executable, "-m", "bench.async_checkpoint", "--mode", mode, *passthrough]
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            out = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
            record = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(record))
            results[mode].append(float(record["steps_per_s"]))
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    summary = {f"{mode}_steps_per_s_median": round(value, 3) for mode, value in medians.items()}
    print(json.dumps({**summary, "async_over_sync": round(medians["async"] / medians["sync"], 3),
                      "repeats": args.repeats, "steps": args.steps, "every": args.every}))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="sync and async, --repeats times each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=MODES, default="async")
    parser.add_argument("--model", default="cpu-bench", help="cpu-bench or a trainer preset (tiny, 125M, ...)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--scratch", default=None, help="folder for the checkpoints (default: the temp dir)")
    args = parser.parse_args(argv)
    if args.compare:
        same = ["--model", args.model, "--device", args.device, "--steps", str(args.steps), "--every", str(args.every),
                "--micro-batch", str(args.micro_batch), "--seq-len", str(args.seq_len), "--vocab", str(args.vocab),
                *(["--bf16"] if args.bf16 else []), *(["--scratch", args.scratch] if args.scratch else [])]  # fmt: skip
        compare(args, same)
    else:
        print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
