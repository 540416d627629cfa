"""Plain Ray tasks for the work after dedup: mixture tokenization and shard writing, tokenizer training.

Why plain ``ray.remote`` here and datatrove's ``RayPipelineExecutor`` for curate and dedup: those stages
are datatrove pipelines (rank, world size, per-task completion files, stats), while a mixture build is
``[fn(task) for task in tasks]`` whose *return values* (token counts, document lengths, shard sha256s)
the driver needs to plan the copies and write the manifest, and which is all-or-nothing (its parts live
in a temporary folder that the next build removes). A Ray task returns its value to the driver and is
retried by Ray when its worker dies (``max_retries``); every task writes only its own files, each
atomically or from scratch, so a retry is harmless. Results come back in task order, so the shards and
the manifest are byte-identical to the local build's.

The functions run are the stage packages' own (``mixtures.encode.encode_task``,
``mixtures.writer.write_shard``, ``tokenizer.train.train_tokenizer``): Ray imports them by module name
on the workers, from the project root that ``connect`` puts on their ``PYTHONPATH``; their inputs and
outputs are paths in the run directory, which must be on storage every node sees.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pipelines.errors import ExecutorError
from pipelines.ray_cluster.executor import alive_nodes, connect, fit_resources

T = TypeVar("T")
R = TypeVar("R")

GIB = 1024**3
PROGRESS_EVERY_S = 5.0
RETRIES = 3


@dataclass(frozen=True)
class RayResources:
    """What one Ray task reserves: CPUs and Ray memory (GB, as datatrove counts them: GiB)."""

    cpus: int
    memory_gb: float

    def options(self) -> dict[str, Any]:
        return {"num_cpus": self.cpus, "memory": int(self.memory_gb * GIB), "max_retries": RETRIES}


def task_resources(cpus_per_task: int = 1, mem_per_task_gb: float | None = None) -> RayResources:
    """Resources of one map task, checked against the alive nodes (``RayResourceError`` if none fits)."""
    return RayResources(cpus_per_task, fit_resources(alive_nodes(), cpus_per_task, mem_per_task_gb))


def node_resources(mem_gb: float | None = None) -> RayResources:
    """A task that uses one whole node (tokenizer training: one process, all its cores): the largest node's CPUs."""
    nodes = alive_nodes()
    cpus = max(1, int(max((n.get("CPU", 0) for n in nodes), default=1)))
    return RayResources(cpus, fit_resources(nodes, cpus, mem_gb))


def _call(fn: Callable[..., R], threads: int, *args: Any, **kwargs: Any) -> R:
    """Runs on the worker: the Rust tokenizers size their thread pool to the task's CPUs, not the node's."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    return fn(*args, **kwargs)


def _documents(result: Any) -> int:
    """Documents a task handled (``TokenPart.documents``, ``ShardFile.documents``, ``TrainResult.documents``)."""
    value = getattr(result, "documents", 0)
    return value if isinstance(value, int) else 0


class _Progress:
    """``[ray] stage: done/total tasks, N documents, X docs/s``, every few seconds and at the end."""

    def __init__(self, stage: str, total: int):
        self.stage, self.total, self.done, self.docs = stage, total, 0, 0
        self.start = self.last = time.time()

    def add(self, result: Any) -> None:
        self.done += 1
        self.docs += _documents(result)

    def line(self) -> str:
        rate = self.docs / max(time.time() - self.start, 1e-9)
        return f"[ray] {self.stage}: {self.done}/{self.total} tasks, {self.docs} documents, {rate:.1f} docs/s"

    def tick(self, final: bool = False) -> None:
        if final or time.time() - self.last >= PROGRESS_EVERY_S:
            print(self.line(), flush=True)
            self.last = time.time()


def ray_map(
    fn: Callable[[T], R], tasks: Sequence[T], stage: str, resources: RayResources, window: int | None = None
) -> list[R]:
    """``[fn(t) for t in tasks]`` as Ray tasks; results in task order; at most ``window`` tasks submitted at once.

    The window (default: twice the task slots of the cluster) keeps the object store from holding every
    task's arguments at once on a large build.
    """
    import ray

    if not tasks:
        return []
    if window is None:
        window = 2 * max(1, int(ray.cluster_resources().get("CPU", 1) // resources.cpus))
    remote = ray.remote(_call).options(**resources.options())
    progress = _Progress(stage, len(tasks))
    out: list[Any] = [None] * len(tasks)
    pending: dict[Any, int] = {}
    queue = iter(enumerate(tasks))
    try:
        while True:
            for i, task in queue:
                pending[remote.remote(fn, resources.cpus, task)] = i
                if len(pending) >= window:
                    break
            if not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=PROGRESS_EVERY_S)
            for ref in ready:
                result = _get(ref, stage)
                out[pending.pop(ref)] = result
                progress.add(result)
            progress.tick()
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    progress.tick(final=True)
    return out


def run_one(fn: Callable[..., R], *args: Any, stage: str, resources: RayResources, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)`` as one Ray task in a fresh worker process (its thread pool sized to the task)."""
    import ray

    remote = ray.remote(max_calls=1)(_call).options(**resources.options())
    progress = _Progress(stage, 1)
    ref = remote.remote(fn, resources.cpus, *args, **kwargs)
    while not ray.wait([ref], timeout=PROGRESS_EVERY_S)[0]:
        progress.tick()
    result = _get(ref, stage)
    progress.add(result)
    progress.tick(final=True)
    return result


def _get(ref: Any, stage: str) -> Any:
    """The task's value; a task whose worker kept dying (after Ray's retries) is a one-line ``ExecutorError``."""
    import ray
    from ray.exceptions import NodeDiedError, WorkerCrashedError

    try:
        return ray.get(ref)
    except (WorkerCrashedError, NodeDiedError) as err:
        raise ExecutorError(f"{stage}: a Ray task failed {RETRIES + 1} times ({type(err).__name__}); rerun") from None


class RayTaskRunner:
    """The ``mixtures.pool.task_runner`` for a Ray cluster: each ``run_tasks`` call becomes ``ray_map``.

    ``mixtures`` calls ``run_tasks(fn, tasks, workers, desc=...)`` for tokenization ("tokenizing") and shard
    writing ("writing shards"); ``desc`` names the stage in the progress lines.
    """

    def __init__(self, resources: RayResources, prefix: str = "mixture"):
        self.resources, self.prefix = resources, prefix

    def __call__(self, fn: Callable[[T], R], tasks: Sequence[T], desc: str = "") -> list[R]:
        stage = f"{self.prefix} {desc}".strip()
        return ray_map(fn, tasks, stage, self.resources)


__all__ = [
    "RayResources",
    "RayTaskRunner",
    "connect",
    "node_resources",
    "ray_map",
    "run_one",
    "task_resources",
]
