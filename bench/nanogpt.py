"""Our training loop against nanoGPT's, on nanoGPT's own CPU example (README: shakespeare_char on a laptop).

    python -m bench.nanogpt --nanogpt PATH/TO/nanoGPT --repeats 1   # PATH/TO/nanoGPT: a git clone of karpathy/nanoGPT

nanoGPT's source is exported from the git directory (or checkout) given on the command line into a
temp folder at bench time; nothing of it is copied into this project. Its own `prepare.py` makes the
90/10 split of `../shared/data/tinyshakespeare/input.txt`; its `train.py` runs the README's CPU command
(4 layers, 4 heads, dim 128, block 64, batch 12, 2,000 iterations, no dropout, fp32, no compile).

Ours trains the same characters (nanoGPT's `meta.pkl` ids, plus `<|endoftext|>` which the data never
contains) through the whole path a user takes: a mixture built by `mixtures.build` with `separator:
none` from the training split cut into paragraphs (repeated ~1.55x so 2,000 steps of 12 windows fit in
one epoch), then `python trainer/fsdp_train.py` with the shape on the command line (`--dim 128
--n-layers 4 --n-heads 4 --ffn-dim 341`: 803k parameters against nanoGPT's 804k (with its position
table), the LR schedule following `--max-steps`, nanoGPT's lr 1e-3 / min 1e-4 / warmup 100 / betas
(0.9, 0.99) / weight decay 0.1 / clip 1.0.

Both validation figures are the mean loss over the same 1,716 non-overlapping 65-token windows of
the whole validation split (ours: the trainer's final eval on `--val-shards` holding the split as one
document; nanoGPT: its final checkpoint, scored here with its own model code). Throughput is the
median over iterations of each loop's own per-iteration time (nanoGPT's printed `time`, our
`metrics.jsonl` `tokens_per_s`), so the evaluation pauses do not count on either side. The runs
alternate (nanoGPT, ours, ours, nanoGPT, ...) so machine load hits both alike; on a machine shared
with other jobs, whose load drifts over a 4-minute run, `--concurrent` runs each pair at the same time
(one thread each) instead.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.shared_data import shared_data_dir

REPO = Path(__file__).resolve().parents[1]
SHARED = shared_data_dir()
NANOGPT_FILES = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py",
                 "data/shakespeare_char/prepare.py")  # fmt: skip
BLOCK, BATCH, EVAL_BATCH = 64, 12, 12
NANOGPT_FLAGS = [
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    f"--block_size={BLOCK}",
    f"--batch_size={BATCH}",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--dropout=0.0",
]  # fmt: skip  (the README's CPU command; --max_iters/--lr_decay_iters added per run)
# nanoGPT's config/train_shakespeare_char.py values, spelled as our flags
OURS_FLAGS = [
    "--dim", "128", "--n-layers", "4", "--n-heads", "4", "--n-kv-heads", "4", "--ffn-dim", "341",
    "--seq-len", str(BLOCK), "--micro-batch", str(BATCH), "--lr", "1e-3", "--min-lr-ratio", "0.1",
    "--warmup-steps", "100", "--betas", "0.9", "0.99", "--weight-decay", "0.1", "--grad-clip", "1.0",
    "--no-bf16", "--log-every", "1", "--eval-every", "0", "--schedule-span", "max_steps",
    "--no-export-hf", "--device", "cpu",
]  # fmt: skip
ITER_LINE = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")

# Scores nanoGPT's final checkpoint with its own model code, on the windows our trainer evaluates.
NANOGPT_EVAL = """
import json, sys, numpy as np, torch
from model import GPT, GPTConfig
ckpt = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
model = GPT(GPTConfig(**ckpt["model_args"]))
model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
model.eval()
val = np.fromfile(sys.argv[2], dtype=np.uint16).astype(np.int64)
block, batch = int(sys.argv[3]), int(sys.argv[4])
windows = torch.from_numpy(val[: len(val) // (block + 1) * (block + 1)].reshape(-1, block + 1))
windows = windows[: len(windows) // batch * batch]
with torch.no_grad():
    losses = [float(model(w[:, :-1].contiguous(), w[:, 1:].contiguous())[1]) for w in windows.split(batch)]
print(json.dumps({"iter": ckpt["iter_num"], "val_loss": sum(losses) / len(losses), "windows": len(windows)}))
"""


def export_nanogpt(source: Path, dest: Path) -> str:
    """nanoGPT's files from a checkout or a (bare) git directory into `dest`; returns its commit."""
    dest.mkdir(parents=True)
    if (source / "train.py").is_file():
        for name in NANOGPT_FILES:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, dest / name)
        commit = "checkout"
    else:
        git = ["git", "--git-dir", str(source)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout
        archive = subprocess.run([*git, "archive", "HEAD", *NANOGPT_FILES], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return commit.strip()


def prepare_nanogpt_data(nano: Path, text_file: Path) -> Path:
    """nanoGPT's own prepare.py on the shared text (it downloads only when input.txt is missing)."""
    data = nano / "data" / "shakespeare_char"
    shutil.copy2(text_file, data / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return data


def _paragraphs(text: str) -> list[str]:
    """The text cut after each blank line; joined back, the pieces are the text."""
    pieces = re.split(r"(?<=\n\n)", text)
    return [p for p in pieces if p]


def prepare_ours(data: Path, scratch: Path, iters: int) -> tuple[Path, Path, Path]:
    """(train mixture, val mixture, tokenizer.json) over nanoGPT's split and character ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models

    from mixtures.build import build_mixture

    meta = pickle.loads((data / "meta.pkl").read_bytes())
    tok = Tokenizer(models.BPE(vocab=dict(meta["stoi"]), merges=[]))
    tok.add_special_tokens(["<|endoftext|>"])
    tok_file = scratch / "tokenizer" / "tokenizer.json"
    tok_file.parent.mkdir(parents=True)
    tok.save(str(tok_file))
    text = (data / "input.txt").read_text()
    cut = int(len(text) * 0.9)  # nanoGPT's prepare.py split
    splits = {"train": _paragraphs(text[:cut]), "val": [text[cut:]]}
    for name, docs in splits.items():
        (scratch / name).mkdir()
        pq.write_table(pa.Table.from_pylist([{"text": d} for d in docs]), scratch / name / "docs.parquet")
    train_tokens = iters * BATCH * (BLOCK + 1) + 40 * (BLOCK + 1)  # a few windows of slack for the plan
    specs = {
        "train": {"target_tokens": train_tokens, "max_repetition": 3},
        "val": {"target_tokens": len(text) - cut, "max_repetition": 1},
    }
    out = {}
    for name, spec in specs.items():
        mix = {
            "tokenizer": str(tok_file), "target_tokens": spec["target_tokens"], "seq_len": BLOCK, "seed": 0,
            "separator": "none", "tokens_per_file": 1 << 30,
            "sources": [{"name": name, "path": str(scratch / name), "weight": 1,
                         "max_repetition": spec["max_repetition"]}],
        }  # fmt: skip
        build_mixture(mix, scratch / f"mix_{name}", progress=False)
        out[name] = scratch / f"mix_{name}"
    return out["train"], out["val"], tok_file


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}


def run_nanogpt(nano: Path, data: Path, iters: int, threads: int, out: Path) -> dict:
    flags = [*NANOGPT_FLAGS, f"--max_iters={iters}", f"--lr_decay_iters={iters}"]
    flags.append(f"--eval_interval={250 if iters % 250 == 0 else iters}")  # the last iteration evaluates, saves
    flags += ["--always_save_checkpoint=True", f"--out_dir={out}"]  # keep the final model to score it
    cmd = [sys.executable, "train.py", "config/train_shakespeare_char.py", *flags]
    proc = subprocess.run(cmd, cwd=nano, env=_env(threads), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoGPT failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    times = [float(m.group(2)) / 1000 for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m]
    score = [sys.executable, "-c", NANOGPT_EVAL, str(out / "ckpt.pt"), str(data / "val.bin"), str(BLOCK),
             str(EVAL_BATCH)]  # fmt: skip
    scored = subprocess.run(score, cwd=nano, env=_env(threads), capture_output=True, text=True, check=True)
    val = json.loads(scored.stdout.strip().splitlines()[-1])
    return {"loop": "nanogpt", "iters": len(times), "tokens_per_s": BATCH * BLOCK / statistics.median(times),
            "val_loss": val["val_loss"], "val_windows": val["windows"]}  # fmt: skip


def run_ours(train: Path, val: Path, tok: Path, iters: int, threads: int, out: Path, extra: list[str]) -> dict:
    val_batches = str(10**6)  # every window of the split (the trainer caps it at what the split holds)
    flags = ["--shards", str(train), "--tokenizer", str(tok), "--out", str(out), "--max-steps", str(iters)]
    flags += ["--val-shards", str(val), "--val-batches", val_batches, *OURS_FLAGS, *extra]
    cmd = [sys.executable, str(REPO / "trainer" / "fsdp_train.py"), *flags]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(threads), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ours failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > 1]
    val_loss = [r["val_loss"] for r in records if "val_loss" in r][-1]
    params = re.search(r"([\d.]+)M params", proc.stdout)
    return {"loop": "ours", "iters": max(r["step"] for r in records), "tokens_per_s": statistics.median(rates),
            "val_loss": val_loss, "params_m": float(params.group(1)) if params else None}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, required=True, help="nanoGPT checkout or git directory")
    parser.add_argument("--text", type=Path, default=SHARED / "tinyshakespeare" / "input.txt")
    parser.add_argument("--iters", type=int, default=2000, help="iterations of each run (README: 2000)")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs, order alternating")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of each run")
    parser.add_argument("--ours-flags", default="--compile", help="extra trainer flags for ours (quoted)")
    parser.add_argument(
        "--concurrent", action="store_true", help="run each pair at the same time (a machine shared with other jobs)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the scratch folder here")
    args = parser.parse_args(argv)
    if not args.text.is_file():
        sys.exit(f"error: {args.text} not found (the shared tinyshakespeare)")
    scratch = Path(tempfile.mkdtemp(prefix="nanogpt-bench-")) if args.keep is None else args.keep
    try:
        commit = export_nanogpt(args.nanogpt, scratch / "nanogpt")
        data = prepare_nanogpt_data(scratch / "nanogpt", args.text)
        train, val, tok = prepare_ours(data, scratch, args.iters)
        print(json.dumps({"nanogpt_commit": commit, "iters": args.iters, "threads": args.threads}), flush=True)
        runs: dict[str, list[dict]] = {"nanogpt": [], "ours": []}

        def run(loop: str, r: int) -> dict:
            out = scratch / f"run_{loop}_{r}"
            if loop == "nanogpt":
                return run_nanogpt(scratch / "nanogpt", data, args.iters, args.threads, out)
            return run_ours(train, val, tok, args.iters, args.threads, out, args.ours_flags.split())

        for r in range(args.repeats):
            order = ("nanogpt", "ours") if r % 2 == 0 else ("ours", "nanogpt")
            if args.concurrent:  # both at once: a shared machine's load hits both at the same moments
                with ThreadPoolExecutor(2) as pool:
                    results = dict(zip(order, pool.map(run, order, [r, r]), strict=True))
            else:
                results = {loop: run(loop, r) for loop in order}
            for loop in order:
                runs[loop].append(results[loop])
                print(json.dumps({"repeat": r, **results[loop]}), flush=True)
        med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in runs.items()}
        summary = {
            "tokens_per_s_median": med,
            "ratio_ours_vs_nanogpt": med["ours"] / med["nanogpt"],
            "ratio_per_repeat": [o["tokens_per_s"] / n["tokens_per_s"] for n, o in zip(*runs.values(), strict=True)],
            "val_loss": {k: [x["val_loss"] for x in v] for k, v in runs.items()},
        }
        print(json.dumps(summary), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
