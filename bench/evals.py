"""BLiMP evaluation speed: ours (`evals.tasks.Blimp` on our plain-PyTorch model) vs lm-evaluation-harness's
`hf` backend (HFLM, transformers' LlamaForCausalLM), on the same exported model and the same pairs.

    python -m bench.evals                              # 2,000 BLiMP pairs, tiny preset, 3 repeats
    python -m bench.evals --model out/train/hf --pairs 5000 --batch-size 64

Without --model, a randomly initialised model of `--preset` is exported with the shared GPT-Neo
tokenizer (speed does not depend on the weights). Both sides load the model once, outside the
timing; each timing runs from the JSONL file to the accuracy (reading, tokenizing, batching,
forwards). The two run one after the other in each repeat, in alternating order, in this process
with the same torch threads and batch size. Medians of pairs per second and their ratio are
printed (wall time, and per CPU second of this process, steadier on a shared machine); the last
line gives the right pairs of each side (they must be equal for BLiMP).

    python -m bench.evals --core ../shared/data/core_tasks --per-task 20   # a CORE pass instead of BLiMP

With `--core`, ours is the CORE suite (`evals.tasks.core.Suite`, its first `per-task x tasks` items: about
`per-task` rows of each of its tasks, few-shot prompts included) and lm-eval gets the same rows with the
same prompt text (`evals.harness.icl_rows`: one local json task per CORE task, choices / context options
scored by loglikelihood, language-modelling rows by loglikelihood's greedy `acc`). The throughput is in
rows per second. The right answers are printed, not compared: CORE picks the choice by mean
log-probability per token, lm-eval's `acc` by the sum (the equality of our counts to lm-eval's on its
own rule is tests/evals/test_lm_eval_oracle.py's job).

    python -m bench.evals --core ../shared/data/core_tasks --per-task 10 --no-lm-eval   # prefix cache vs plain

With `--core`, a third side, "ours plain", scores the same rows without the shared-prefix KV cache
(`share_prefix=False`: every choice re-encodes its few-shot context); the ratio ours / ours plain is
the cache's speedup, and both sides' right rows must be equal. `--no-lm-eval` leaves lm-eval out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from common.cli import ArgumentParser
from evals.harness import hf_model, icl_rows, run_lm_eval
from evals.models import load_model
from evals.tasks import Blimp, Suite, evaluate
from tests.support.shared_data import shared_data_dir


def random_export(preset: str, tok_file: Path, out: Path) -> Path:
    """A randomly initialised model of `preset` with `tok_file`, exported for both sides."""
    from tokenizers import Tokenizer

    from trainer.config import get_preset
    from trainer.export_hf import export_hf
    from trainer.model import Transformer

    vocab = Tokenizer.from_file(str(tok_file)).get_vocab_size(with_added_tokens=True)
    cfg = get_preset(preset).with_vocab(vocab)
    torch.manual_seed(0)
    eos = Tokenizer.from_file(str(tok_file)).token_to_id("<|endoftext|>")
    export_hf(Transformer(cfg).state_dict(), cfg, out, tokenizer=tok_file, eos_id=eos, bos_id=eos)
    named = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}  # what AutoTokenizer (lm-eval) reads
    (out / "tokenizer_config.json").write_text(json.dumps({**named, "tokenizer_class": "PreTrainedTokenizerFast"}))
    (out / "special_tokens_map.json").write_text(json.dumps(named))
    return out


def blimp_subset(n: int, out: Path) -> Path:
    """`n` pairs spread evenly over the shared BLiMP file (most paradigms), as plain JSONL."""
    import gzip

    with gzip.open(shared_data_dir() / "blimp" / "blimp.jsonl.gz", "rt", encoding="utf-8") as handle:
        lines = handle.readlines()
    step = max(1, len(lines) // n)
    out.write_text("".join(lines[::step][:n]), encoding="utf-8")
    return out


Side = Callable[[], float]


def blimp_sides(args: argparse.Namespace, work: Path, ours_model: Any, lm: Any) -> tuple[int, Side, Side]:
    """The BLiMP pairs and each side's pass over them (-> accuracy)."""
    pairs = blimp_subset(args.pairs, work / "blimp.jsonl")

    def ours() -> float:
        task = Blimp.from_path(pairs)
        return evaluate(task, ours_model.encoder, ours_model.scorer(args.batch_size))["accuracy"]

    def theirs() -> float:
        return run_lm_eval(lm, {"blimp": pairs})["blimp"]["metrics"]["acc"]

    return sum(1 for _ in pairs.open()), ours, theirs


def core_sides(args: argparse.Namespace, work: Path, ours_model: Any, lm: Any) -> tuple[int, Side, Side, Side]:
    """The first per-task x tasks items of the CORE suite and each side's pass (-> share of rows right):
    ours, lm-eval, ours without the shared-prefix cache."""
    suite = Suite.from_folder("core", args.core)
    n = min(len(suite), args.per_task * len(suite.tasks))
    files: dict[str, Path] = {}
    for t, task in enumerate(suite.tasks):
        kind, rows = icl_rows(task, [row for tt, row in suite.index[:n] if tt == t])
        path = work / f"{task.name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files[f"{kind}:{task.name}"] = path

    def ours(share_prefix: bool = True) -> float:
        score = ours_model.scorer(args.batch_size, share_prefix=share_prefix)
        result = evaluate(suite, ours_model.encoder, score, limit=n)
        return sum(r["acc"] * r["n"] for r in result["tasks"].values()) / n

    def theirs() -> float:
        report = run_lm_eval(lm, files)
        return sum(r["metrics"]["acc"] * len(r["lls"]) for r in report.values()) / n

    return n, ours, theirs, lambda: ours(share_prefix=False)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="an exported HF folder (default: a random --preset model)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=shared_data_dir() / "reference_tokenizer_gpt_neo" / "tokenizer.json",
        help="tokenizer.json of the random model (default: the shared GPT-Neo one, 50,257 tokens)",
    )
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--core", type=Path, help="a core_tasks folder: bench a CORE pass instead of BLiMP")
    parser.add_argument("--per-task", type=int, default=20, help="with --core: rows of each CORE task")
    parser.add_argument("--no-lm-eval", action="store_true", help="leave lm-eval's side out")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-evals-"))
    os.environ.setdefault("HF_HOME", str(work / "hf_home"))
    model_dir = args.model or random_export(args.preset, args.tokenizer, work / "model")
    ours_model = load_model(model_dir, backend="ours", device=args.device)
    lm = None if args.no_lm_eval else hf_model(model_dir, args.batch_size, args.device)
    sides: list[tuple[str, Side]] = []
    if args.core:
        n, ours, theirs, plain = core_sides(args, work, ours_model, lm)
        sides.append(("ours plain", plain))
        unit = "rows"
    else:
        n, ours, theirs = blimp_sides(args, work, ours_model, lm)
        unit = "pairs"
    sides.insert(0, ("ours", ours))
    if lm is not None:
        sides.insert(1, ("lm-eval hf", theirs))
    print(
        f"model {model_dir} ({ours_model.backend}), {n} {unit}, batch {args.batch_size}, "
        f"torch threads {torch.get_num_threads()}, device {args.device}"
    )

    rates: dict[str, list[float]] = {name: [] for name, _ in sides}
    cpu_rates: dict[str, list[float]] = {name: [] for name, _ in sides}
    accuracy: dict[str, float] = {}
    for repeat in range(args.repeats):
        for name, fn in sides if repeat % 2 == 0 else sides[::-1]:
            start, cpu_start = time.perf_counter(), time.process_time()
            accuracy[name] = fn()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            rates[name].append(n / seconds)
            cpu_rates[name].append(n / cpu)
            print(
                f"repeat {repeat + 1} {name:>10}: {n / seconds:9.1f} {unit}/s ({seconds:.2f} s wall, {cpu:.2f} s CPU), "
                f"accuracy {accuracy[name]:.4f}"
            )
    for label, table in (("", rates), (" per CPU second", cpu_rates)):
        med = {k: statistics.median(v) for k, v in table.items()}
        others = ", ".join(f"{k} {v:.1f} (ours {med['ours'] / v:.2f}x)" for k, v in med.items() if k != "ours")
        print(f"median {unit}/s{label}: ours {med['ours']:.1f}; {others}")
    print(f"right {unit}: " + ", ".join(f"{k} {round(v * n)}" for k, v in accuracy.items()))


if __name__ == "__main__":
    main()
