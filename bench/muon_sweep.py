"""Muon vs AdamW on nanoGPT's shakespeare_char CPU config, each at its best learning rate of a small sweep.

    python -m bench.muon_sweep --iters 300 --lrs 1e-3 3e-3 1e-2

Same model, data, steps, tokens and schedule for both (bench.nanogpt's flags: 4 x 128, block 64, batch
12, warmup 100, cosine to 10 %, clip 1.0, fp32); only `--optimizer` and `--lr` change. The character ids
are the sorted characters of the text (nanoGPT's prepare.py's `meta.pkl`, written here). The figure is
the validation loss over every 65-token window of the last 10 % of the text after the last step.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import tempfile
from pathlib import Path

from bench.nanogpt import SHARED, prepare_ours, run_ours
from common.cli import ArgumentParser


def _char_meta(text_file: Path, dest: Path) -> Path:
    """input.txt + meta.pkl (nanoGPT's character vocabulary) in `dest`."""
    dest.mkdir(parents=True)
    text = text_file.read_text()
    chars = sorted(set(text))
    meta = {"vocab_size": len(chars), "stoi": {c: i for i, c in enumerate(chars)}}
    (dest / "meta.pkl").write_bytes(pickle.dumps(meta))
    shutil.copyfile(text_file, dest / "input.txt")
    return dest


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    text = SHARED / "tinyshakespeare" / "input.txt"
    if not text.is_file():
        raise SystemExit(f"error: {text} not found (the shared data)")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        train, val, tok = prepare_ours(_char_meta(text, scratch / "data"), scratch / "ours", args.iters)
        results = []
        for optimizer in ("adamw", "muon"):
            for lr in args.lrs:
                extra = ["--optimizer", optimizer, "--lr", str(lr)]
                run = run_ours(train, val, tok, args.iters, args.threads, scratch / f"{optimizer}-{lr}", extra)
                results.append({"optimizer": optimizer, "lr": lr, **run})
                print(json.dumps(results[-1]), flush=True)
    for optimizer in ("adamw", "muon"):
        best = min((r for r in results if r["optimizer"] == optimizer), key=lambda r: r["val_loss"])
        print(f"best {optimizer}: lr {best['lr']:g} val_loss {best['val_loss']:.4f} "
              f"({best['tokens_per_s']:.0f} tokens/s median)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
