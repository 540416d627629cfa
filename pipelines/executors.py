"""Executor choice: the same pipeline objects run on every executor.

``local`` is datatrove's ``LocalPipelineExecutor`` (a process pool, one task per WARC shard).
An executor factory takes the pipeline, the task count, the worker count and the stage's logging
folder; ``ray`` registers here the same way (its own issue).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datatrove.executor.base import PipelineExecutor
from datatrove.executor.local import LocalPipelineExecutor

from pipelines.layout import StageFolder

ExecutorFactory = Callable[..., PipelineExecutor]


def local_executor(
    pipeline: list, tasks: int, workers: int, logging_dir: StageFolder, **_: Any
) -> PipelineExecutor:
    return LocalPipelineExecutor(
        pipeline=pipeline,
        tasks=tasks,
        workers=min(workers, tasks),
        logging_dir=logging_dir,
        skip_completed=True,
        start_method="fork",
    )


EXECUTORS: dict[str, ExecutorFactory] = {"local": local_executor}


def make_executor(
    kind: str, pipeline: list, tasks: int, workers: int, logging_dir: StageFolder, **options: Any
):
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; available: {', '.join(EXECUTORS)}")
    return EXECUTORS[kind](pipeline, tasks=tasks, workers=workers, logging_dir=logging_dir, **options)
