"""Training with a checkpoint every N steps: synchronous saves (DCP `save`) against `--async-checkpoint`.

    python -m bench.async_checkpoint --compare --repeats 3          # CPU: sync vs async, fresh processes
    python -m bench.async_checkpoint --compare --store --repeats 3  # the same with the checkpoints on S3
    python -m bench.async_checkpoint --mode async --device cuda --model 125M --steps 40 --every 5

Both modes run `trainer.engine.TrainEngine.train_step` on the same random batches (same seed) and save
through `trainer.checkpoint.Checkpointer` (DCP shards, checksums manifest, atomic rename, keep 2); the
clock runs from the first step to the last checkpoint committed (the async run waits for its last
write), so a save that only moved to the end is not counted as a gain. Each run prints one JSON line,
with the training loop's stall per save (the time `save` held the loop: median over the run's saves);
`--compare` alternates the modes `--repeats` times in fresh processes and prints the medians of each.

`--store`: the checkpoints are committed on moto's S3 server on 127.0.0.1 (`tests.support.s3_server`, the
real s3fs client over HTTP) through `trainer.store.StoreCheckpointer`, and a third mode runs:
`async-upload-at-save`, the background save whose upload and commit on the store run on the training
thread at the next save (main before the upload got its own thread), against `async`, whose upload runs
behind training in the rank's upload thread. moto keeps objects in memory on this machine.
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
from typing import Any

import torch

from bench.train import model_config
from common.cli import ArgumentParser

REPO = Path(__file__).resolve().parents[1]
MODES = ("sync", "async")
STORE_MODES = ("sync", "async-upload-at-save", "async")


def _checkpointer(args: argparse.Namespace, root: Path, info: Any) -> Any:
    """The mode's checkpointer: local, or committing on `--store-url`."""
    from trainer.checkpoint import Checkpointer
    from trainer.store import StoreCheckpointer

    background = args.mode != "sync"
    if args.store_url is None:
        return Checkpointer(root, keep=2, background=background)

    class UploadAtSave(StoreCheckpointer):
        """main before the upload thread: DCP's background write, then the upload and the commit on the store
        on the training thread, when the next save (or the end) waits for the write."""

        def _save_in_background(self, *save: Any) -> None:
            Checkpointer._save_in_background(self, *save)

        def after_commit(self, final: Path) -> None:
            self.publish(final, self._records_at_save)

    kind = UploadAtSave if args.mode == "async-upload-at-save" else StoreCheckpointer
    return kind(root, 2, args.store_url, info, background)


def run(args: argparse.Namespace) -> dict[str, float | str]:
    """One timed run in this process (one rank); the checkpoints go to a temporary folder, removed after."""
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.optim import OptimConfig

    info = init_distributed(args.device)
    cfg = model_config(args.model, args.seq_len, args.vocab)
    engine = TrainEngine(cfg, info, OptimConfig(lr=1e-3, warmup_steps=2), args.steps, seed=0, bf16=args.bf16)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, cfg.vocab_size, (args.micro_batch, args.seq_len + 1), generator=g) for _ in range(4)]
    root = Path(tempfile.mkdtemp(prefix="bench-async-ckpt-", dir=args.scratch))
    stalls: list[float] = []
    try:
        ckpt = _checkpointer(args, root, info)
        engine.train_step([batches[0]])  # warm-up step and save (first-use costs), not timed
        ckpt.save(0, engine.model, engine.optimizer, engine.scheduler, {"consumed_samples": 0})
        ckpt.finish()
        start = time.perf_counter()
        for step in range(1, args.steps + 1):
            engine.train_step([batches[step % len(batches)]])
            if step % args.every == 0:
                held = time.perf_counter()
                ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, {"consumed_samples": step})
                stalls.append(time.perf_counter() - held)
        held = time.perf_counter()
        ckpt.finish()
        if info.device.type == "cuda":
            torch.cuda.synchronize()
        end = time.perf_counter()
        size = sum(f.stat().st_size for f in (root / f"step_{args.steps:09d}").iterdir())
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutdown(info)
    return {"mode": args.mode, "steps_per_s": args.steps / (end - start), "seconds": end - start,
            "save_stall_s_median": statistics.median(stalls), "final_wait_s": end - held,
            "checkpoint_mib": size / 2**20, "params_m": cfg.num_params() / 1e6,
            "store": args.store_url is not None}  # fmt: skip


def compare(args: argparse.Namespace, passthrough: list[str]) -> None:
    """Fresh processes, the modes alternated so both see the same machine load; medians and the ratio."""
    modes = STORE_MODES if args.store else MODES
    server = None
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if args.store:
        from tests.support.s3_server import S3Server, subprocess_env

        server = S3Server().start()
        with server.use():
            server.make_bucket("bench-ckpt")
        env = subprocess_env(server, PYTHONPATH=str(REPO))
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    try:
        for repeat in range(args.repeats):
            for mode in modes:
                cmd = [sys.executable, "-m", "bench.async_checkpoint", "--mode", mode, *passthrough]
                if server is not None:
                    cmd += ["--store-url", f"s3://bench-ckpt/{mode}-{repeat}"]
                out = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout
                record = json.loads(out.strip().splitlines()[-1])
                print(json.dumps(record), flush=True)
                results[mode].append(record)
    finally:
        if server is not None:
            server.stop()
    summary: dict[str, Any] = {}
    for mode, records in results.items():
        for key in ("steps_per_s", "save_stall_s_median", "final_wait_s"):
            summary[f"{mode}_{key}"] = round(statistics.median(float(r[key]) for r in records), 3)
    speedup = summary["async_steps_per_s"] / summary["sync_steps_per_s"]
    print(json.dumps({**summary, "async_over_sync": round(speedup, 3), "store": args.store,
                      "repeats": args.repeats, "steps": args.steps, "every": args.every}))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="every mode, --repeats times each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=STORE_MODES, default="async")
    parser.add_argument("--store", action="store_true", help="--compare: checkpoints on a local moto S3 server")
    parser.add_argument("--store-url", default=None, help="one run: commit the checkpoints under this URL")
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
    if args.mode == "async-upload-at-save" and args.store_url is None:
        parser.error("--mode async-upload-at-save needs --store-url")
    if args.compare:
        same = ["--model", args.model, "--device", args.device, "--steps", str(args.steps), "--every", str(args.every),
                "--micro-batch", str(args.micro_batch), "--seq-len", str(args.seq_len), "--vocab", str(args.vocab),
                *(["--bf16"] if args.bf16 else []), *(["--scratch", args.scratch] if args.scratch else [])]  # fmt: skip
        compare(args, same)
    else:
        print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
