"""Evaluate a model on local task files and write the figures as JSON.

    python -m evals.run out/train/hf --task blimp=../shared/data/blimp/blimp.jsonl.gz \
        --task bpb=held_out/ --task mc=examples/evals/mc_example.jsonl --out eval.json

MODEL: an exported Hugging Face folder (config.json, model.safetensors, tokenizer.json), a trainer
--out folder (its hf/, else its newest checkpoint) or a checkpoint step_* folder.
Tasks: blimp (BLiMP JSONL), bpb (.txt / .jsonl(.gz) / parquet with `text`, or a folder of them),
mc (JSONL with context, choices, gold; see evals/README.md), gsm8k (JSONL with question and answer:
greedy generations scored on the number after `####`, as `evals.generate --gsm8k`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from common.cli import BATCH, TOKENS, ArgumentParser, integer, one_line
from common.lock import check_not_input, file_lock
from evals.generate import Generator, answer_gsm8k, load_transformer
from evals.gsm8k import Problem, read_problems
from evals.models import LoadedModel, ModelLoadError, cpu_threads, load_model, pick_device
from evals.tasks import Request, Task, TaskDataError, evaluate, load_task, parse_task_specs
from evals.tasks.base import shard_items
from evals.tasks.blimp import Blimp, comparison_table, read_reference
from evals.tasks.core import SUITES, suite_table


def run_task(task: Task, model: LoadedModel, batch_size: int, limit: int | None, progress: bool) -> dict[str, Any]:
    """One task over the model with a progress bar counted in scored sequences."""
    bar = tqdm(desc=task.name, unit="seq", total=0, disable=not progress, dynamic_ncols=True)
    inner = model.scorer(batch_size=batch_size, progress=bar.update)

    def score(requests: Sequence[Request]) -> list[float]:
        bar.total += len(requests)  # the task hands all its requests at once: the bar's total and its ETA
        bar.refresh()
        return inner(requests)

    try:
        return evaluate(task, model.encoder, score, limit=limit)
    finally:
        bar.close()


def gsm8k_generator(model_path: Path, prompt: str, device: str) -> tuple[Generator, bool]:
    """Our model for GSM8K's greedy generations, and whether its questions go in the chat format (`prompt`
    auto: when the tokenizer has the chat tokens, i.e. a fine-tuned model; else the bare question)."""
    gen = Generator(*load_transformer(model_path, device))
    chat = gen.has_chat_tokens if prompt == "auto" else prompt == "chat"
    if chat and not gen.has_chat_tokens:
        raise ModelLoadError("--gsm8k-prompt chat needs a tokenizer with the chat tokens (tokenizer.chat)")
    return gen, chat


def run_gsm8k(
    gen: Generator, chat: bool, problems: list[Problem], max_new_tokens: int, progress: bool
) -> dict[str, Any]:
    """Exact final answers and the `#### n` format rate, with every generation kept for reading."""
    texts, figures = answer_gsm8k(gen, problems, chat, max_new_tokens, progress)
    generations = [{"question": p.question, "gold": p.gold, "text": t} for p, t in zip(problems, texts, strict=True)]
    return {**figures, "prompt": "chat" if chat else "plain", "max_new_tokens": max_new_tokens,
            "generations": generations}  # fmt: skip


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, path)


def summary_line(name: str, result: dict[str, Any]) -> str:
    if name in SUITES:
        return suite_table(name, result)
    if name == "blimp":
        return f"blimp: accuracy {100 * result['accuracy']:.2f} % on {result['n']} pairs"
    if name == "gsm8k":
        return (
            f"gsm8k: exact answers {result['exact']}/{result['n']} ({100 * result['accuracy']:.2f} %), "
            f"ending in `#### n` {result['formatted']}/{result['n']} ({result['prompt']} prompts)"
        )
    if name == "bpb":
        return f"bpb: {result['bits_per_byte']:.4f} bits/byte over {result['bytes']} bytes ({result['tokens']} tokens)"
    return f"mc: acc {result['acc']:.4f}, acc_norm {result['acc_norm']:.4f} on {result['n']} questions"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m evals.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", type=Path, help="HF folder, trainer output folder or checkpoint step_* folder")
    parser.add_argument("--task", action="append", default=[], metavar="NAME=PATH", help="repeatable")
    parser.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="core (DCLM's CORE) or fineweb (FineWeb's early-signal tasks) over a folder of llm-foundry ICL files "
        "with its tasks.json; repeatable. HellaSwag, SQuAD, CoQA and MMLU are not available offline",
    )
    parser.add_argument(
        "--fewshot-from", type=Path, metavar="DIR", help="a suite's few-shot examples from the same files in DIR"
    )
    parser.add_argument(
        "--limit", type=integer(1, 1 << 40), help="N items of each task, spread evenly over its file (default: all)"
    )
    parser.add_argument("--batch-size", type=BATCH, default=32, help="sequences per forward (default 32)")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default: print only)")
    parser.add_argument(
        "--backend", choices=["auto", "ours", "hf"], default="auto", help="model code: ours or transformers"
    )
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:1 ...")
    parser.add_argument(
        "--max-new-tokens", type=TOKENS, default=256, help="gsm8k: tokens generated per answer at most (default 256)"
    )
    parser.add_argument(
        "--gsm8k-prompt",
        choices=["auto", "chat", "plain"],
        default="auto",
        help="gsm8k: the question as a chat turn or bare (auto: chat when the tokenizer has the chat tokens)",
    )
    parser.add_argument("--bpb-stride", type=TOKENS, help="sliding-window stride for bpb (default: context // 2)")
    parser.add_argument("--blimp-reference", type=Path, help="models_summary.jsonl (default: beside the BLiMP file)")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for spec in args.suite:
            if spec.partition("=")[0] not in SUITES:
                raise TaskDataError(f"unknown suite {spec.partition('=')[0]!r}; choose from {', '.join(SUITES)}")
        args.task += args.suite
        if not args.task:
            raise TaskDataError("no --task or --suite given")
        if args.limit is not None and args.limit < 1:
            raise TaskDataError("--limit must be >= 1")
        if args.batch_size < 1:
            raise TaskDataError("--batch-size must be >= 1")
        if args.out and args.out.is_dir():
            raise TaskDataError(f"--out {args.out} is a folder; give the path of the JSON file to write")
        if args.max_new_tokens < 1:
            raise TaskDataError("--max-new-tokens must be >= 1")
        specs = parse_task_specs(args.task, "--task", generative=True)
        if args.out:  # the report must not replace what the run reads
            files = {**{f"--task {n} file": p for n, p in specs.items()}, "--blimp-reference": args.blimp_reference}
            check_not_input(args.out, files, {"model folder": args.model})
        pick_device(args.device)  # a bogus or absent device, before any file is read
        gsm8k_path = specs.pop("gsm8k", None)
        if gsm8k_path is not None and args.backend == "hf":
            raise TaskDataError("--task gsm8k generates with our model code: drop --backend hf")
        problems = read_problems(gsm8k_path) if gsm8k_path is not None else []
        problems = [problems[i] for i in shard_items(len(problems), limit=args.limit)]
        tasks = {name: load_task(name, path) for name, path in specs.items()}  # bad data fails before the model
        if args.fewshot_from:
            for name in set(tasks) & set(SUITES):
                tasks[name].draw_shots_from(args.fewshot_from)  # type: ignore[attr-defined]
        if args.bpb_stride is not None and "bpb" in tasks:
            tasks["bpb"].stride = args.bpb_stride  # type: ignore[attr-defined]
        generator = gsm8k_generator(args.model, args.gsm8k_prompt, args.device) if problems else None
        model = load_model(args.model, backend=args.backend, device=args.device) if tasks else None
        if args.out:  # one run per report file, taken once the inputs passed: two would both write it
            file_lock(args.out, "evals.run").acquire()  # held until this process exits
        if (model.device if model else pick_device(args.device)).type == "cpu":
            threads, why = cpu_threads()
            torch.set_num_threads(threads)
            print(f"cpu threads: {threads} ({why})", file=sys.stderr, flush=True)
        results: dict[str, Any] = {}
        if generator is not None:
            start = time.perf_counter()
            results["gsm8k"] = run_gsm8k(*generator, problems, args.max_new_tokens, not args.no_progress)
            print(f"{summary_line('gsm8k', results['gsm8k'])}  [{time.perf_counter() - start:.1f} s]", flush=True)
        for name, task in tasks.items():
            assert model is not None  # loaded above whenever a task scores with it
            start = time.perf_counter()
            results[name] = run_task(task, model, args.batch_size, args.limit, not args.no_progress)
            print(f"{summary_line(name, results[name])}  [{time.perf_counter() - start:.1f} s]", flush=True)
            if isinstance(task, Blimp):
                ref = args.blimp_reference or specs["blimp"].parent / "models_summary.jsonl"
                if ref.is_file():
                    print(comparison_table(results[name], task, read_reference(ref)), flush=True)
    except (TaskDataError, ModelLoadError, ValueError) as err:  # FolderUnavailable is a ValueError
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    report = {"model": str(args.model), "tasks": results}
    if args.out:
        write_json_atomic(args.out, report)
        print(f"wrote {args.out}")
    else:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
