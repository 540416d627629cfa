"""Executor choice: the same pipeline objects run on every executor.

``local`` is datatrove's ``LocalPipelineExecutor`` (a process pool, one task per WARC shard).
An executor factory takes the pipeline, the task count, the worker count and the stage's logging
folder. ``ray`` (``common/ray_cluster/executor.py``) is datatrove's ``RayPipelineExecutor`` on a Ray
cluster, sized to it; its options (``ray``: a ``RayOptions``, ``workers_set``) come through
``**options``, which the local executor ignores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from datatrove.executor.base import ExecutorJSONEncoder, PipelineExecutor
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.utils.stats import PipelineStats

from common.storage import keys_under, on_object_store
from pipelines.errors import ExecutorError
from pipelines.layout import StageFolder

__all__ = ["EXECUTORS", "ExecutorError", "RunLocalExecutor", "TaskStats", "make_executor"]


def _in_background(name: str, call: Callable[..., Any], *args: Any) -> Future:
    """``call(*args)`` on a thread of its own (a request the stage need not wait for yet); its future."""
    thread = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return thread.submit(call, *args)
    finally:
        thread.shutdown(wait=False)


class TaskStats(PipelineStats):
    """Stats of tasks, with the ``stats/NNNNN.json`` text each task wrote, by file name (``files``). datatrove's
    local executor returns the sum of its tasks' stats; summed as these, it also returns their files, so that the
    driver's merge of the run's stats (``pipelines.stats``) need not read back what its own tasks just wrote (on a
    store a GET per task: 14 for a band stage)."""

    def __init__(self, stats: list | None = None, files: dict[str, str] | None = None) -> None:
        super().__init__(stats)
        self.files = files or {}

    def __add__(self, other: PipelineStats) -> TaskStats:
        return TaskStats(super().__add__(other).stats, {**self.files, **getattr(other, "files", {})})

    def __radd__(self, other: PipelineStats) -> TaskStats:  # datatrove's sum starts from a PipelineStats()
        return TaskStats(PipelineStats.__add__(other, self).stats, {**getattr(other, "files", {}), **self.files})


class RunLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor, asking which tasks completed once per stage: one listing of the stage's
    ``completions/`` when the stage starts, instead of a look-up per task (datatrove checks each rank again
    in the task's own process: on a store a HEAD each, one round trip before any work) and a second listing
    for the ranks to run. The listing stays true for the stage: the run lock keeps any other writer out, and
    only this stage's tasks complete ranks. Once the stage ran, the question is asked of the store again."""

    # the stage's executor.json on its way (a store); a class default, so that the executor.json it writes
    # (datatrove's encoder takes the instance's attributes) holds the same keys as ever
    _saving: Future | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._completed: frozenset[str] | None = None  # listed once, then travels with the pickled executor
        self._marker: Future | None = None  # a task's completion marker on its way (a store)

    def _completed_now(self) -> frozenset[str]:
        if self._completed is None:
            folder, fs = self.logging_dir, self.logging_dir.fs
            if on_object_store(fs):  # one listing, also when it finds none
                names = keys_under(fs, folder._join("completions"))
                self._completed = frozenset(f"completions/{name.rsplit('/', 1)[-1]}" for name in names)
            else:
                self._completed = frozenset(folder.list_files("completions"))
        return self._completed

    def list_completions(self) -> float:
        """List the stage's completed tasks now (``run`` uses the answer); the seconds the listing took."""
        started = time.perf_counter()
        self._completed = None
        self._completed_now()
        return time.perf_counter() - started

    def is_rank_completed(self, rank: int) -> bool:
        return self.skip_completed and f"completions/{rank:05d}" in self._completed_now()

    def save_executor_as_json(self, indent: int = 4) -> None:
        """On a store the stage's ``executor.json`` (a log, no output) goes up while datatrove starts the stage's
        process manager, one round trip the stage waited for; ``get_incomplete_ranks``, which datatrove asks
        next, before any task process is forked, waits for it and raises its failure."""
        if not on_object_store(self.logging_dir.fs):
            super().save_executor_as_json(indent)
            return
        text = json.dumps(self, cls=ExecutorJSONEncoder, indent=indent)  # datatrove's bytes, taken now
        self._saving = _in_background("executor-json", self._write_executor_json, text)

    def _write_executor_json(self, text: str) -> None:
        with self.logging_dir.open("executor.json", "w") as f:
            f.write(text)

    def _saved(self) -> None:
        saving = self.__dict__.pop("_saving", None)  # back to the class default
        if saving is not None:
            saving.result()

    def get_incomplete_ranks(self, ranks: Any = None, skip_completed: bool | None = None) -> list[int]:
        self._saved()  # never fork the tasks' processes with a request of this process on its way
        if self._completed is None:  # not during run(): which ranks are missing now (the executor's errors)
            return super().get_incomplete_ranks(ranks, skip_completed)
        skip = self.skip_completed if skip_completed is None else skip_completed
        ranks = ranks if ranks is not None else range(self.world_size)
        return [rank for rank in ranks if not skip or f"completions/{rank:05d}" not in self._completed]

    def run(self) -> Any:
        try:
            return super().run()
        finally:
            self._completed = None
            self._saved()

    def mark_rank_as_completed(self, rank: int) -> None:
        """On a store the marker goes up while datatrove closes the task's log (its upload, one round trip
        after the marker's): the marker vouches for the task's outputs and stats, both landed before it is
        sent, not for its log. ``_run_for_rank`` waits for it and raises its failure."""
        if not on_object_store(self.logging_dir.fs):
            super().mark_rank_as_completed(rank)
            return
        self._marker = _in_background("completion", super().mark_rank_as_completed, rank)

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> Any:
        """The task's stats as ``TaskStats`` with the text of its stats file (none for a task it skipped)."""
        skipped = self.is_rank_completed(rank)  # as datatrove asks it first (our listing: no request)
        try:
            stats = super()._run_for_rank(rank, local_rank, node_rank)
            if skipped or node_rank > 0:  # no stats file written by this task
                return stats
            return TaskStats(stats.stats, {f"{rank:05d}.json": stats.to_json()})  # datatrove's save_to_disk text
        finally:
            marker, self._marker = self._marker, None
            if marker is not None:
                marker.result()


def local_executor(pipeline: list, tasks: int, workers: int, logging_dir: StageFolder, **_: Any) -> PipelineExecutor:
    workers = min(workers, tasks)
    return RunLocalExecutor(pipeline, tasks, workers, logging_dir, skip_completed=True, start_method="fork")


def ray_executor(pipeline: list, **options: Any) -> PipelineExecutor:
    """Imported on use: ``ray`` is needed only by runs that ask for it."""
    from common.ray_cluster.executor import ray_executor as make_ray

    return make_ray(pipeline, **options)


def slurm_executor(pipeline: list, logging_dir: StageFolder, **options: Any) -> PipelineExecutor:
    """One job array per stage (``common/slurm_arrays.py``); its options: ``slurm``, ``workers_set``."""
    from common.slurm_arrays import array_executor

    return array_executor(pipeline, logging_dir=logging_dir, stage=logging_dir.stage, **options)


EXECUTORS: dict[str, Callable[..., PipelineExecutor]] = {
    "local": local_executor,
    "ray": ray_executor,
    "slurm": slurm_executor,
}


def make_executor(
    kind: str, pipeline: list, tasks: int, workers: int, logging_dir: StageFolder, **options: Any
) -> PipelineExecutor:
    """The executor ``kind`` for one stage; an unknown kind is a ``ValueError`` naming the known ones."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; available: {', '.join(EXECUTORS)}")
    return EXECUTORS[kind](pipeline, tasks=tasks, workers=workers, logging_dir=logging_dir, **options)
