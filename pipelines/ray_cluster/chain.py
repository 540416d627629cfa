"""The chain's tokenizer and mixture steps on Ray (``--executor ray --train``): the local functions, as Ray tasks.

Tokenizer training is one process by nature (HF tokenizers' BPE trainer), so it is *one* task that
reserves the largest node's CPUs, next to the data. A mixture build is ``mixtures.build.build_mixture``
itself, its tokenization and shard-writing tasks handed to ``ray_map`` through ``mixtures.pool.task_runner``.

Why plain ``ray.remote`` and not datatrove's ``RayPipelineExecutor`` (curate, dedup): a mixture build is
``[fn(task) for task in tasks]`` whose *return values* (token counts, document lengths, shard sha256s)
the driver needs to plan the copies and write the manifest. A Ray task returns its value and is retried
when its worker dies (``max_retries``); every task writes only its own files, atomically or from scratch,
so a retry is harmless, and results come back in task order, so the tokenizer, shards and manifest are
byte-identical to a local run's. Workers import the functions by module name from the project root that
``connect`` puts on their ``PYTHONPATH``; their inputs and outputs are paths on storage every node sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from common.ray_cluster.executor import GIB, Progress, RayOptions, alive_nodes, connect, fit_resources
from pipelines.errors import ExecutorError

if TYPE_CHECKING:
    from mixtures.manifest import Manifest

T = TypeVar("T")
R = TypeVar("R")
RETRIES = 3


@dataclass(frozen=True)
class RayResources:
    """What one Ray task reserves: CPUs and Ray memory (GB, as datatrove counts them: GiB)."""

    cpus: int
    memory_gb: float

    def options(self) -> dict[str, Any]:
        return {"num_cpus": self.cpus, "memory": int(self.memory_gb * GIB), "max_retries": RETRIES}


def _call(fn: Callable[..., R], threads: int, *args: Any) -> R:
    """Runs on the worker: the Rust tokenizers size their thread pool to the task's CPUs, not the node's."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    return fn(*args)


def _get(ref: Any, stage: str) -> Any:
    """The task's value; a task whose worker kept dying (after Ray's retries) is a one-line ``ExecutorError``."""
    import ray
    from ray.exceptions import NodeDiedError, WorkerCrashedError

    try:
        return ray.get(ref)
    except (WorkerCrashedError, NodeDiedError) as err:
        raise ExecutorError(f"{stage}: a Ray task failed {RETRIES + 1} times ({type(err).__name__}); rerun") from None


def ray_map(
    fn: Callable[[T], R], tasks: Sequence[T], stage: str, resources: RayResources, fresh_workers: bool = False
) -> list[R]:
    """``[fn(t) for t in tasks]`` as Ray tasks, results in task order (``fresh_workers``: a new process each).

    At most twice the cluster's task slots are submitted at once, so the object store never holds every
    task's arguments of a large build.
    """
    import ray

    if not tasks:
        return []
    window = 2 * max(1, int(ray.cluster_resources().get("CPU", 1) // resources.cpus))
    remote = ray.remote(max_calls=1 if fresh_workers else 0)(_call).options(**resources.options())
    progress = Progress(stage, len(tasks))
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
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=progress.every)
            for ref in ready:
                out[pending.pop(ref)] = result = _get(ref, stage)
                documents = getattr(result, "documents", 0)  # TokenPart, ShardFile and TrainResult count them
                progress.done += 1
                progress.docs += documents if isinstance(documents, int) else 0
            progress.tick()
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    progress.report()
    return out


class RayChain:
    """Connects once; each method is the local step's function run as Ray work."""

    def __init__(self, options: RayOptions):
        connect(options.address)
        nodes = alive_nodes()
        cpus, mem = options.cpus_per_task, options.mem_per_task_gb
        self.task = RayResources(cpus, fit_resources(nodes, cpus, mem))
        node_cpus = max(1, int(max((n.get("CPU", 0) for n in nodes), default=1)))  # the largest node's CPUs
        self.node = RayResources(node_cpus, fit_resources(nodes, node_cpus, mem))

    def train_tokenizer(self, inputs: Sequence[str], out_dir: Path, **kwargs: Any) -> Any:
        """One task on a whole node, in a fresh worker process (its thread pool sized to the node's CPUs)."""
        from tokenizer.train import train_tokenizer

        def train(_: None) -> Any:
            return train_tokenizer(list(inputs), out_dir, progress=False, **kwargs)

        return ray_map(train, [None], "tokenizer", self.node, fresh_workers=True)[0]

    def build_mixture(self, spec: dict[str, Any], out_dir: Path, **kwargs: Any) -> Manifest:
        """``build_mixture`` with each ``run_tasks`` call (tokenizing, writing shards) a ``ray_map``."""
        from mixtures.build import build_mixture
        from mixtures.pool import task_runner

        def on_ray(fn: Callable[[T], R], tasks: Sequence[T], desc: str = "") -> list[R]:
            return ray_map(fn, tasks, f"mixture {desc}".strip(), self.task)

        with task_runner(on_ray):
            return build_mixture(spec, out_dir, progress=False, **kwargs)
