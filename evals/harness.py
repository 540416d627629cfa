"""The same tasks run by lm-evaluation-harness's `hf` backend: the oracle for tests and the peer for the bench.

lm-eval is a dev dependency, imported only here. Each task is an lm-eval task config (what a task
YAML holds) pointing at a local JSONL through the `json` dataset builder, so nothing downloads:
BLiMP with the settings of lm-eval's own `blimp/_template_yaml`, multiple choice with our format's
fields. The offline switches are set before `datasets` is imported.

    python -m evals.harness MODEL_DIR --task blimp=pairs.jsonl --task mc=questions.jsonl --out lm_eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.cli import BATCH, ArgumentParser, fail, integer
from common.jsonl import JsonlError, iter_jsonl
from common.lock import check_not_input
from evals.tasks.icl import InContextTask

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def task_config(kind: str, data_file: Path, label: str = "") -> dict[str, Any]:
    """An lm-eval task config (named cc2model_LABEL, default the kind) for a local BLiMP or multiple-choice
    JSONL file."""
    base = {
        "task": f"cc2model_{label or kind}",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"train": str(Path(data_file).resolve())}},
        "output_type": "multiple_choice",
        "test_split": "train",
        "num_fewshot": 0,
    }
    if kind.startswith("icl_"):  # CORE prompts rendered by `icl_rows`: the delimiter is already in the context
        if kind != "icl_greedy":
            return {**task_config(kind.removeprefix("icl_"), data_file, label or kind), "target_delimiter": ""}
        return {  # loglikelihood's acc: every continuation token is the argmax
            **base,
            "output_type": "loglikelihood",
            "doc_to_text": "context",
            "doc_to_target": "continuation",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
            "target_delimiter": "",
        }
    if kind == "blimp":  # lm_eval/tasks/blimp/_template_yaml
        return {
            **base,
            "doc_to_text": "",
            "doc_to_target": 0,
            "doc_to_choice": "{{[sentence_good, sentence_bad]}}",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        }
    if kind == "mc_partial":  # lm-eval's winogrande: doc_to_text an int -> one context per choice
        return {
            **base,
            "doc_to_text": "gold",
            "doc_to_target": "continuation",
            "doc_to_choice": "contexts",
            "metric_list": [
                {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
            ],
        }
    if kind == "mc":
        return {
            **base,
            "doc_to_text": "context",  # a field name: lm-eval returns the field as is
            "doc_to_target": "gold",
            "doc_to_choice": "choices",
            "metric_list": [
                {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
            ],
        }
    raise ValueError(f"lm-eval bridge knows blimp, mc and mc_partial, not {kind!r}")


def lm_eval_rows(task: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """llm-foundry ICL rows of ARC, PIQA, COPA or WinoGrande -> our `mc` rows in lm-eval's prompt format
    (`arc_easy`, `piqa`: "Question: ...\nAnswer:"; `copa`: the premise with its connective, as llm-foundry
    already writes it; `winogrande`: partial rows, one context per option)."""
    if task == "winogrande":
        return [{"contexts": r["context_options"], "continuation": r["continuation"], "gold": r["gold"]} for r in rows]
    if task in ("arc_easy", "arc_challenge", "piqa"):
        return [{"context": r["query"].strip() + "\nAnswer:", "choices": r["choices"], "gold": r["gold"]} for r in rows]
    if task == "copa":
        return [{"context": r["query"], "choices": r["choices"], "gold": r["gold"]} for r in rows]
    raise ValueError(f"no lm-eval conversion for {task!r}")


def icl_rows(task: InContextTask, items: Sequence[int]) -> tuple[str, list[dict[str, Any]]]:
    """The CORE prompts of `items` (their few-shot block and delimiter included) as rows of an lm-eval task
    kind (`icl_mc`, `icl_mc_partial`, `icl_greedy`): the same text and sequences for both sides of a bench."""
    rows = []
    for i in items:
        row, shots, delim = task.rows[i], task.shots(i), task.delimiter
        if task.kind == "multiple_choice":
            rows.append({"context": shots + row["query"] + delim, "choices": row["choices"], "gold": row["gold"]})
        elif task.kind == "schema":
            contexts = [shots + option + delim for option in row["context_options"]]
            rows.append({"contexts": contexts, "continuation": row["continuation"], "gold": row["gold"]})
        else:
            rows.append({"context": shots + row["context"].strip() + delim, "continuation": row["continuation"]})
    kind = {"multiple_choice": "icl_mc", "schema": "icl_mc_partial"}.get(task.kind, "icl_greedy")
    return kind, rows


def hf_model(model_dir: Path, batch_size: int, device: str = "cpu") -> Any:
    """lm-eval's `hf` backend (HFLM) on an exported folder, fp32."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_dir), dtype="float32", batch_size=batch_size, device=device)


def run_lm_eval(lm: Any, tasks: dict[str, Path], limit: int | None = None) -> dict[str, Any]:
    """{key: {"metrics": {...}, "lls": [[ll per choice] per doc, in file order]}} from lm-eval; a key is a kind
    or `kind:label` (several files of one kind)."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    import lm_eval

    configs = [task_config(key.partition(":")[0], path, key.partition(":")[2]) for key, path in tasks.items()]
    out = lm_eval.simple_evaluate(
        model=lm, tasks=configs, limit=limit, log_samples=True, bootstrap_iters=0, verbosity="ERROR"
    )
    report = {}
    for kind in tasks:
        name = "cc2model_" + (kind.partition(":")[2] or kind)
        metrics = {k.split(",")[0]: v for k, v in out["results"][name].items() if k.endswith(",none")}
        samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
        lls = [[float(r[0][0]) for r in s["resps"]] for s in samples]
        report[kind] = {"metrics": metrics, "lls": lls}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m evals.harness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", type=Path)
    parser.add_argument("--task", action="append", default=[], metavar="KIND=PATH")
    parser.add_argument("--limit", type=integer(1, 1 << 40))
    parser.add_argument("--batch-size", type=BATCH, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tasks = {k: Path(p) for k, _, p in (t.partition("=") for t in args.task)}
    for kind, path in tasks.items():  # before the model loads (seconds): a missing, FIFO or folder task file
        if not kind or not path.is_file():
            fail(f"--task {kind}={path}: give KIND=PATH of a regular file")
        try:  # rows that are JSON objects, within the size cap: lm-eval failed on anything else with a traceback
            rows = [row for _, row in iter_jsonl(path)]
        except (JsonlError, OSError) as err:
            fail(f"--task {kind}: {err}")
        if not rows or not all(isinstance(row, dict) for row in rows):
            fail(f"--task {kind}: {path} holds no rows, or a row that is not a JSON object")
    if (args.limit is not None and args.limit < 1) or args.batch_size < 1:
        fail(f"--limit and --batch-size must be >= 1, got {args.limit} and {args.batch_size}")
    try:
        check_not_input(args.out, {f"--task {k} file": p for k, p in tasks.items()}, {"model folder": args.model})
    except ValueError as err:
        fail(err)
    if args.out.is_dir():
        fail(f"--out {args.out} is a folder; give the path of the JSON file to write")
    try:
        model = hf_model(args.model, args.batch_size, args.device)
    except (OSError, ValueError, RuntimeError) as err:  # transformers: not a model it knows, a bad device
        fail(f"{args.model}: cannot load the model ({err})")
    report = run_lm_eval(model, tasks, args.limit)
    args.out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
