"""Document masking on vs off: validation loss and tokens/s on the bundled sample's mixture, same seed and data.

    python -m pipelines.run sample --out out                # once: curate, dedup, tokenizer, mixture
    python -m bench.document_masking --sample out/sample --repeats 2

Each repeat trains the tiny model (fp32, one in-process rank) from the same seed on the same windows
twice, masking off then on, in fresh processes, one after the other; the last shard is held out.
Validation is scored the way each run trains (masked windows with the mask), so the figure is what
`--document-masking` changes for a user. Prints medians and the on / off ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common.cli import ArgumentParser

REPO = Path(__file__).resolve().parents[1]


def run(sample: Path, out: Path, masking: bool, steps: int, extra: list[str]) -> dict:
    flags = ["--shards", str(sample / "mixture"), "--tokenizer", str(sample / "tokenizer"), "--out", str(out)]
    flags += ["--model", "tiny", "--no-bf16", "--micro-batch", "4", "--lr", "3e-3", "--val-holdout-files", "1"]
    flags += ["--max-steps", str(steps), "--schedule-span", "max_steps", "--eval-every", str(steps)]
    flags += ["--log-every", "1", "--no-export-hf", *(["--document-masking"] if masking else []), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "trainer/fsdp_train.py", *flags], cwd=REPO, env=env, capture_output=True)
    if proc.returncode:
        sys.exit(f"error: training failed: {proc.stderr.decode()[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    speeds = [r["tokens_per_s"] for r in records if "tokens_per_s" in r][1:]  # the first step compiles nothing
    val = [r["val_loss"] for r in records if "val_loss" in r]
    return {"masking": masking, "val_loss": val[-1], "tokens_per_s": statistics.median(speeds)}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sample", type=Path, required=True, help="a `pipelines.run sample` folder (mixture/, tokenizer/)"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--trainer-flags", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args(argv)
    if not (args.sample / "mixture" / "manifest.json").is_file():
        sys.exit(f"error: {args.sample} has no mixture/manifest.json (run `python -m pipelines.run sample` first)")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.repeats):
            for masking in (False, True):
                row = run(args.sample, Path(scratch) / f"r{i}_{masking}", masking, args.steps, args.trainer_flags)
                print(json.dumps({"repeat": i, **row}), flush=True)
                rows.append(row)
    summary = {}
    for masking in (False, True):
        mine = [r for r in rows if r["masking"] == masking]
        summary["on" if masking else "off"] = {
            key: statistics.median(r[key] for r in mine) for key in ("val_loss", "tokens_per_s")
        }
    on, off = summary["on"], summary["off"]
    print(json.dumps({**summary, "val_loss_on_minus_off": on["val_loss"] - off["val_loss"],
                      "speed_on_over_off": on["tokens_per_s"] / off["tokens_per_s"]}))  # fmt: skip


if __name__ == "__main__":
    main()
