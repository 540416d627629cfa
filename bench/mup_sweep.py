"""μP's learning-rate transfer: an LR sweep at a small width and at 4x that width, μP beside SP.

    python -m bench.mup_sweep --shards out/mixture --seed 0 --out sweep.jsonl      # mup and sp, widths 32, 128
    python -m bench.mup_sweep --shards out/mixture --seed 1 --params mup --out sweep.jsonl
    python -m bench.mup_sweep --summarize sweep.jsonl       # mean over the seeds; best LR per width
    python -m bench.mup_sweep --shards out/mixture --steps 400 --log2-lrs -10 -9 -8 -7 -6 -5 --seed 0 --out s400
    python -m bench.mup_sweep --shards out/mixture --optimizer muon --steps 400 --seed 0 --out muon.jsonl

On a token mixture (`mixtures.build`; its last shard file is held out for validation, as the trainer's
`--val-holdout-files 1`), each (parametrisation, width, LR) trains the project's model (`--n-layers`,
`--n-heads` fixed, so head_dim grows with width; ffn 4 x dim) with the project's AdamW (`trainer.optim`;
`--optimizer muon`: `trainer.muon`'s MuonAdamW; μP's per-group LRs when on), LR schedule (warmup 10 %,
cosine to 10 %), z-loss-free `lm_loss`, clip 1.0, fp32, 200 steps of 8 x 64 tokens, the same windows in
the same order for every run of a seed, then reports the validation loss on every held-out window. μP's
base width is the smallest width. The LRs are powers of 2 (one sweep step = 2x): the question is whether
the best LR of the small width is within one step of the best at 4x width.

The sample's mixture (what the README's figures used):

    python -m pipelines.run sample --out out
    python -m tokenizer.train --input out/sample --vocab-size 4096 --out out/tokenizer
    python -m mixtures.build bench/mup_sample_mixture.yaml --out out/mixture   # epoch of out/sample, seq 128
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.cli import ArgumentParser
from mixtures.reader import ShardReader
from trainer.config import ModelConfig
from trainer.data import WindowIndex
from trainer.model import Transformer, lm_loss
from trainer.muon import build_muon
from trainer.optim import build_optimizer
from trainer.schedule import build_scheduler


def windows(shards: Path, seq_len: int) -> tuple[WindowIndex, WindowIndex, int]:
    """(train windows, held-out windows of the last file, vocab size)."""
    reader = ShardReader(shards, verify=False)
    if len(reader) < 2:
        raise SystemExit(f"error: {shards} has {len(reader)} shard file(s); need 2 or more (the last is held out)")
    train = WindowIndex(reader, seq_len, list(range(len(reader) - 1)))
    val = WindowIndex(reader, seq_len, [len(reader) - 1])
    return train, val, reader.manifest.tokenizer.vocab_size


def run_one(args: argparse.Namespace, data: tuple[WindowIndex, WindowIndex, int], width: int, lr: float,
            mup: bool) -> dict[str, object]:  # fmt: skip
    train, val, vocab = data
    base = min(args.widths)
    cfg = ModelConfig(dim=width, n_layers=args.n_layers, n_heads=args.n_heads, n_kv_heads=args.n_heads,
                      ffn_dim=4 * width, max_seq_len=args.seq_len, mup_base_dim=base if mup else 0
                      ).with_vocab(vocab)  # fmt: skip
    torch.manual_seed(args.seed)
    model = Transformer(cfg)
    width_mult = cfg.mup_width_mult if mup else None
    if args.optimizer == "muon":  # Muon on the hidden matrices (lr / sqrt(m) under μP), AdamW on the rest
        betas = (0.9, 0.95)
        optimizer: torch.optim.Optimizer = build_muon(model, lr, args.weight_decay, betas, mup_width_mult=width_mult)
    else:
        optimizer = build_optimizer(model, lr, args.weight_decay, mup_width_mult=width_mult)
    scheduler = build_scheduler(optimizer, args.steps, max(1, args.steps // 10), "cosine", 0.1)
    order = np.random.default_rng(args.seed).permutation(train.num_windows)
    start, losses = time.perf_counter(), []
    for step in range(args.steps):
        ids = np.take(order, np.arange(step * args.batch, (step + 1) * args.batch), mode="wrap")
        batch = train.batch(ids)
        optimizer.zero_grad(set_to_none=True)
        loss = lm_loss(model(batch[:, :-1]), batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        chunks = np.array_split(np.arange(val.num_windows), max(1, val.num_windows // 32))
        total = sum(float(lm_loss(model(b[:, :-1]), b[:, 1:])) * len(b) for b in map(val.batch, chunks))
    val_loss = total / val.num_windows
    return {
        "param": "mup" if mup else "sp",
        "optimizer": args.optimizer,
        "seed": args.seed,
        "width": width,
        "lr": lr,
        "val_loss": val_loss if math.isfinite(val_loss) else float("inf"),
        "train_loss_last10": float(np.mean(losses[-10:])),
        "seconds": time.perf_counter() - start,
    }


def summary(results: list[dict[str, Any]]) -> list[str]:
    """A table of validation losses (the mean over the runs of each parametrisation, width and LR, e.g. several
    seeds) and, per parametrisation, how many sweep steps apart the best LRs of the smallest and largest width are."""
    runs: dict[tuple[str, int, float], list[float]] = {}
    for r in results:  # Muon's runs are their own rows ("mup+muon"); records before --optimizer were AdamW's
        label = r["param"] + ("+muon" if r.get("optimizer") == "muon" else "")
        runs.setdefault((label, r["width"], r["lr"]), []).append(r["val_loss"])
    mean = {key: float(np.mean(losses)) for key, losses in runs.items()}
    lrs = sorted({lr for _, _, lr in mean})
    lines = [
        "| param | width | " + " | ".join(f"2^{math.log2(lr):g}" for lr in lrs) + " | best |",
        "|---" * (len(lrs) + 3) + "|",
    ]
    best: dict[tuple[str, int], float] = {}
    for param, width in sorted({(p, w) for p, w, _ in mean}):
        row = {lr: mean[(param, width, lr)] for lr in lrs if (param, width, lr) in mean}
        best[(param, width)] = min(row, key=row.__getitem__)
        cells = [f"{row[lr]:.3f}" if lr in row else "" for lr in lrs]
        n = len(runs[(param, width, best[(param, width)])])
        lines.append(
            f"| {param} | {width} | " + " | ".join(cells) + f" | 2^{math.log2(best[(param, width)]):g} (n={n}) |"
        )
    for param in sorted({p for p, _ in best}):
        widths = sorted(w for p, w in best if p == param)
        small, large = best[(param, widths[0])], best[(param, widths[-1])]
        apart = abs(math.log2(small) - math.log2(large))
        lines.append(f"{param}: best LR at width {widths[0]} 2^{math.log2(small):g}, at width {widths[-1]} "
                     f"2^{math.log2(large):g}: {apart:g} sweep step(s) apart")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=Path, help="a mixtures.build folder (its last shard file is held out)")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--log2-lrs", type=int, nargs="+", default=list(range(-11, -3)), help="LR = 2^k")
    parser.add_argument("--params", nargs="+", choices=["mup", "sp"], default=["mup", "sp"])
    parser.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                        help="muon: trainer.muon's MuonAdamW (the Muon group at lr / sqrt(m) under μP)")  # fmt: skip
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (more oversubscribe a busy CPU)")
    parser.add_argument("--out", type=Path, help="append each run's result here as a JSON line")
    parser.add_argument("--summarize", type=Path, nargs="+", help="only print the table of these --out files "
                        "(runs of the same parametrisation, width and LR averaged: several seeds)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.summarize:
        rows = [json.loads(line) for path in args.summarize for line in path.read_text().splitlines() if line.strip()]
        print("\n".join(summary(rows)))
        return
    if args.shards is None:
        parser.error("--shards is required (unless --summarize)")
    torch.set_num_threads(args.threads)
    data = windows(args.shards, args.seq_len)
    results = []
    for param in args.params:
        for width in args.widths:
            for k in args.log2_lrs:
                result = run_one(args, data, width, 2.0**k, param == "mup")
                results.append(result)
                line = json.dumps(result)
                print(line, flush=True)
                if args.out is not None:
                    with args.out.open("a") as f:
                        f.write(line + "\n")
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main()
