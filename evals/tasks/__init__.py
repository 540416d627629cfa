"""Evaluation tasks: data plus a scoring rule over log-probabilities. Depend only on tokenizers/pyarrow,
so the trainer can run them on its own (sharded) model."""

from __future__ import annotations

from pathlib import Path

from evals.tasks.base import Encoder, Request, ScoreFn, Task, TaskDataError, evaluate, task_totals
from evals.tasks.blimp import Blimp
from evals.tasks.bpb import BitsPerByte
from evals.tasks.mc import MultipleChoice

TASKS: dict[str, type[Task]] = {"blimp": Blimp, "bpb": BitsPerByte, "mc": MultipleChoice}


def load_task(name: str, path: str | Path) -> Task:
    """A task by name from its data file; an unknown name or unusable data raises TaskDataError."""
    if name not in TASKS:
        raise TaskDataError(f"unknown task {name!r}; choose from {', '.join(sorted(TASKS))}")
    return TASKS[name].from_path(path)  # type: ignore[attr-defined]


__all__ = [
    "TASKS",
    "BitsPerByte",
    "Blimp",
    "Encoder",
    "MultipleChoice",
    "Request",
    "ScoreFn",
    "Task",
    "TaskDataError",
    "evaluate",
    "load_task",
    "task_totals",
]
