"""Task suites over a folder of llm-foundry ICL files with its `tasks.json`: DCLM's CORE and FineWeb's
early-signal tasks, each one `Task` whose totals add across shards like any other.

`tasks.json` (the format of `../shared/data/core_tasks/`) lists per task: name, suite, file,
icl_task_type, num_fewshot, continuation_delimiter, random_baseline and random_baseline_v2 (percent),
and under `missing` the entries that could not be packed. A suite's score is DCLM's: each task's
accuracy centred on its random baseline, `(acc - b) / (1 - b)`, averaged over the tasks present;
`core` uses the baselines behind DCLM's original CORE (v1), `core_v2` the Sept 2025 corrections. The
entries of the suite that are absent (in `missing`, or whose file is not in the folder) are listed
beside the score, since an average over fewer tasks is not the published CORE.

The suite's items are its tasks' rows interleaved (one row of each task in turn, each task's rows in a
fixed shuffled order), so the first N items (`--limit N`) hold about N / tasks rows of every task.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common.cli import integer, real
from evals.tasks.base import Encoder, Request, Task, TaskDataError
from evals.tasks.icl import InContextTask
from evals.tasks.texts import read_jsonl

ORDER_SEED = 1337  # nanochat shuffles each task's rows with random.Random(1337)
# FineWeb's early-signal tasks (its blog), by DCLM label; hellaswag and mmlu are not available offline
FINEWEB = (
    "arc_easy",
    "arc_challenge",
    "commonsense_qa",
    "openbook_qa",
    "piqa",
    "siqa",
    "winogrande",
    "hellaswag",
    "mmlu_fewshot",
)
SUITES = ("core", "fineweb")


def in_suite(suite: str, entry: Mapping[str, Any]) -> bool:
    return entry.get("suite") == "core" if suite == "core" else entry.get("name") in FINEWEB


# A task's numbers in tasks.json: its shots (no prompt holds more than 65,536 examples) and its chance
# accuracies, in percent.
MANIFEST_NUMBERS = {
    "num_fewshot": integer(0, 1 << 16),
    "random_baseline": real(0, 100),
    "random_baseline_v2": real(0, 100),
}


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / "tasks.json"
    if not path.is_file():
        raise TaskDataError(f"{folder}: no tasks.json (a folder of llm-foundry ICL files with its task list)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TaskDataError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("tasks"), list):
        raise TaskDataError(f"{path}: want an object with a `tasks` list")
    need = ("name", "file", "icl_task_type", "num_fewshot", "continuation_delimiter", "random_baseline")
    for n, entry in enumerate(manifest["tasks"], 1):
        if not isinstance(entry, dict) or any(k not in entry for k in need):
            raise TaskDataError(f"{path}: task {n} lacks one of {', '.join(need)}")
        numbers = [(key, bounded) for key, bounded in MANIFEST_NUMBERS.items() if key in entry]
        for key, bounded in numbers:  # `num_fewshot: .inf` was a traceback, `random_baseline: .nan` a NaN score
            try:
                bounded.check(entry[key], f"task {n} `{key}`")
            except ValueError as err:
                raise TaskDataError(f"{path}: {err}") from None
    return manifest


class Suite(Task):
    """The tasks of one suite from a folder, as one task (keys `TASK/stat`)."""

    limit_takes_prefix = True  # interleaved: the first N items hold about N / tasks rows of every task

    def __init__(
        self,
        name: str,
        tasks: Sequence[InContextTask],
        baselines: Mapping[str, tuple[float, float]],
        missing: Sequence[str],
        files: Mapping[str, str] | None = None,
    ) -> None:
        if not tasks:
            raise TaskDataError(f"suite {name}: none of its tasks is in the folder")
        self.files = dict(files or {})  # task name -> its file name in the folder (for --fewshot-from)
        self.name, self.tasks, self.baselines, self.missing = name, list(tasks), dict(baselines), list(missing)
        orders = []
        for t, task in enumerate(self.tasks):
            rows = list(range(len(task)))
            random.Random(ORDER_SEED).shuffle(rows)
            orders.append([(t, r) for r in rows])
        longest = max(len(o) for o in orders)
        self.index = [o[i] for i in range(longest) for o in orders if i < len(o)]

    @classmethod
    def from_folder(cls, suite: str, path: str | Path) -> Suite:
        folder = Path(path)
        if suite not in SUITES:
            raise TaskDataError(f"unknown suite {suite!r}; choose from {', '.join(SUITES)}")
        if not folder.is_dir():
            raise TaskDataError(f"{folder}: not a folder of ICL task files")
        manifest = read_manifest(folder)
        tasks, baselines, missing, files = [], {}, [], {}
        for entry in manifest.get("missing", []):
            if isinstance(entry, dict) and in_suite(suite, entry):
                missing.append(entry["name"])
        for entry in manifest["tasks"]:
            if not in_suite(suite, entry):
                continue
            file = folder / entry["file"]
            if not file.is_file():
                missing.append(entry["name"])
                continue
            tasks.append(
                InContextTask.from_path(
                    entry["name"],
                    entry["icl_task_type"],
                    file,
                    int(entry["num_fewshot"]),
                    entry["continuation_delimiter"],
                )
            )
            files[entry["name"]] = entry["file"]
            v1 = float(entry["random_baseline"]) / 100
            baselines[entry["name"]] = (v1, float(entry.get("random_baseline_v2", entry["random_baseline"])) / 100)
        return cls(suite, tasks, baselines, missing, files)

    def draw_shots_from(self, folder: str | Path) -> None:
        """Every task's few-shot examples from its same-named file in `folder` (`--fewshot-from`)."""
        for task in self.tasks:
            path = Path(folder) / self.files[task.name]
            task.draw_shots_from(read_jsonl(path), str(path))

    def __len__(self) -> int:
        return len(self.index)

    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        by_task: dict[int, list[int]] = {}
        for item in items:
            t, row = self.index[item]
            by_task.setdefault(t, []).append(row)
        per_task = {t: iter(self.tasks[t].requests(encoder, rows)) for t, rows in by_task.items()}
        return [next(per_task[self.index[item][0]]) for item in items]

    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        t, row = self.index[item]
        task = self.tasks[t]
        return {f"{task.name}/{k}": v for k, v in task.tally(row, scores).items()}

    def keys(self) -> list[str]:
        return [f"{task.name}/{k}" for task in self.tasks for k in task.keys()]

    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        """Per task its metrics and centred accuracies; the suite's means over the tasks scored."""
        per_task: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            mine = {k.split("/", 1)[1]: v for k, v in totals.items() if k.startswith(task.name + "/")}
            if not mine.get("n"):
                continue
            result = task.metrics(mine)
            b1, b2 = self.baselines[task.name]
            result["centered"] = (result["acc"] - b1) / (1 - b1)
            result["centered_v2"] = (result["acc"] - b2) / (1 - b2)
            per_task[task.name] = result

        def mean(key: str) -> float:
            values = [r[key] for r in per_task.values() if key in r]
            return math.fsum(values) / len(values) if values else math.nan

        return {
            self.name: mean("centered"),
            f"{self.name}_v2": mean("centered_v2"),
            "gold_prob": mean("gold_prob"),
            "gold_bpb": mean("gold_bpb"),
            "n": int(sum(r["n"] for r in per_task.values())),
            "n_tasks": len(per_task),
            "missing": list(self.missing),
            "tasks": per_task,
        }


def suite_table(name: str, result: Mapping[str, Any]) -> str:
    """The per-task table of a suite run and its score (both baselines), with the entries it lacks."""
    lines = [f"{'task':<34} {'n':>6} {'acc':>7} {'centred':>8} {'cent_v2':>8} {'gold_p':>7} {'gold_bpb':>8}"]
    for task, r in result["tasks"].items():
        prob = f"{r['gold_prob']:7.4f}" if "gold_prob" in r else f"{'-':>7}"
        lines.append(
            f"{task:<34} {r['n']:>6} {r['acc']:7.4f} {r['centered']:8.4f} {r['centered_v2']:8.4f} {prob} "
            f"{r['gold_bpb']:8.4f}"
        )
    lines.append(
        f"{name.upper()} {result[name]:.4f} (v1 baselines), {result[name + '_v2']:.4f} (v2) over "
        f"{result['n_tasks']} tasks, {result['n']} items"
    )
    if result["missing"]:
        lines.append(f"missing (not available offline, not in the mean): {', '.join(result['missing'])}")
    return "\n".join(lines)
