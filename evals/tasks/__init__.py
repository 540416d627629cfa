"""Evaluation tasks: data plus a scoring rule over log-probabilities. Depend only on tokenizers/pyarrow,
so the trainer can run them on its own (sharded) model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.tasks.base import Encoder, Request, ScoreFn, Task, TaskDataError, evaluate, task_totals
from evals.tasks.blimp import Blimp
from evals.tasks.bpb import BitsPerByte
from evals.tasks.core import SUITES, Suite
from evals.tasks.icl import InContextTask
from evals.tasks.mc import MultipleChoice

TASKS: dict[str, type[Task]] = {"blimp": Blimp, "bpb": BitsPerByte, "mc": MultipleChoice}
NAMES = sorted([*TASKS, *SUITES])  # a suite (core, fineweb) is a task over a folder of ICL files
GENERATIVE = ("gsm8k",)  # tasks that generate text (evals.gsm8k): evals.run only


def load_task(name: str, path: str | Path) -> Task:
    """A task by name from its data file (a suite from its folder); an unknown name or unusable data raises
    TaskDataError."""
    if name in SUITES:
        return Suite.from_folder(name, path)
    if name not in TASKS:
        raise TaskDataError(f"unknown task {name!r}; choose from {', '.join(NAMES)}")
    return TASKS[name].from_path(path)  # type: ignore[attr-defined]


def parse_task_specs(specs: Sequence[str], flag: str = "--task", generative: bool = False) -> dict[str, Path]:
    """`NAME=PATH` flags -> {name: path} in order; a malformed, unknown or repeated one is a TaskDataError
    naming `flag` (``evals.run --task``, the trainer's ``--eval-task``). `generative` admits the tasks that
    generate text (`GENERATIVE`: they need the whole model, so evals.run runs them, the trainer does not)."""
    known = [*NAMES, *GENERATIVE] if generative else NAMES
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise TaskDataError(f"{flag} wants NAME=PATH, got {spec!r}")
        if name in GENERATIVE and not generative:
            raise TaskDataError(f"{flag} {name}: a generative task; run it with python -m evals.run --task")
        if name not in known:
            raise TaskDataError(f"unknown task {name!r}; choose from {', '.join(sorted(known))}")
        if name in out:
            raise TaskDataError(f"{flag} {name} given twice")
        out[name] = Path(path)
    return out


def load_tasks(specs: Sequence[str], flag: str = "--task") -> dict[str, Task]:
    """Every `NAME=PATH` task loaded now, so bad data fails before a model is loaded or trained."""
    return {name: load_task(name, path) for name, path in parse_task_specs(specs, flag).items()}


def headline(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """One number per curve: bpb's bits per byte, BLiMP's accuracy, mc's acc and acc_norm and its continuous
    metrics, a suite's score (both baselines) and its tasks' mean gold probability and bits per byte."""
    out = {}
    for name, r in results.items():
        if name == "bpb":
            out["bpb"] = r["bits_per_byte"]
        elif name == "blimp":
            out["blimp"] = r["accuracy"]
        elif name == "mc":
            out["mc_acc"], out["mc_acc_norm"] = r["acc"], r["acc_norm"]
            out["mc_gold_prob"], out["mc_gold_bpb"] = r["gold_prob"], r["gold_bpb"]
        elif name in SUITES:
            out[name], out[f"{name}_v2"] = r[name], r[f"{name}_v2"]
            out[f"{name}_gold_prob"], out[f"{name}_gold_bpb"] = r["gold_prob"], r["gold_bpb"]
    return out


__all__ = [
    "GENERATIVE",
    "NAMES",
    "TASKS",
    "BitsPerByte",
    "Blimp",
    "Encoder",
    "InContextTask",
    "MultipleChoice",
    "Request",
    "ScoreFn",
    "SUITES",
    "Suite",
    "Task",
    "TaskDataError",
    "evaluate",
    "headline",
    "load_task",
    "load_tasks",
    "parse_task_specs",
    "task_totals",
]
