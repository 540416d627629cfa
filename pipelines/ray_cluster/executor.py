"""The ``ray`` executor: datatrove's ``RayPipelineExecutor`` with the checks a cluster run needs.

Why datatrove's executor and not Ray Data: every stage is already a datatrove pipeline with per-task
completions and stats, and ``RayPipelineExecutor`` runs exactly those tasks (one Ray actor per task,
resubmitted when its worker dies), so the output and the resume rule are the local executor's.
What it lacks, added here:

- a resource check before any work: datatrove asks ``mem_per_cpu_gb`` (2 GB) of Ray memory per CPU
  and, when no node has that much, waits on its placement group forever, silently. The default
  memory is derived from the cluster found, and a request no node can hold is a one-line error;
- console progress per stage (tasks done / total, documents per second), read from the stage's
  completion and stats files on the (shared) run directory;
- a failure when a task did not complete (datatrove only logs a warning).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from datatrove.executor.ray import RayPipelineExecutor

from pipelines.errors import ExecutorError
from pipelines.layout import StageFolder

REPO = Path(__file__).resolve().parents[2]  # pipelines/ray_cluster/executor.py -> the project root
GIB = 1024**3
DATATROVE_MEM_PER_CPU_GB = 2.0


class RayResourceError(ExecutorError):
    """A task's resource request fits on no alive node of the cluster."""


class RayTasksFailed(ExecutorError):
    """Some tasks of a stage did not complete (after datatrove's resubmissions)."""


def connect(address: str | None = None) -> dict[str, Any]:
    """Attach to the cluster at ``address`` (``auto``, ``HOST:PORT``), or start a local Ray instance.

    Workers import this project's modules, so the project root goes on their ``PYTHONPATH``
    (on a multi-node cluster the project must sit at the same path on every node: shared storage).
    A Ray auth token, when one is available, turns token mode on first (``pipelines/ray_cluster/auth.py``).
    """
    import ray

    from pipelines.ray_cluster.auth import enable_for_this_process

    if not ray.is_initialized():
        enable_for_this_process()
        env_vars = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        options = {"ignore_reinit_error": True, "runtime_env": {"env_vars": env_vars}, "log_to_driver": True}
        try:  # the address given, else RAY_ADDRESS, else a cluster started with `ray start` on this machine
            ray.init(address=address or "auto", **options)
        except ConnectionError:
            if address or os.environ.get("RAY_ADDRESS"):
                raise
            start_local(**options)
    return ray.cluster_resources()


def start_local(**options: Any) -> None:
    """Start a Ray instance for this driver alone, reachable from this machine only.

    ``ray.init`` replaces a loopback node address by the machine's routable one, and its GCS, raylet,
    agents and the dashboard / autoscaler metrics endpoints then listen on every interface, without a
    token on the metrics ports. Ray's own switch for "no cluster, loopback only"
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, its default on macOS and Windows) puts every one of them on
    127.0.0.1; it is read when ``ray`` is imported, so the driver's already-imported constant is set too.
    """
    import ray
    from ray._private import ray_constants

    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"  # Ray processes started from here inherit it
    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(address="local", include_dashboard=False, **options)


def alive_nodes() -> list[dict[str, float]]:
    """The resources (``CPU``, ``memory`` in bytes, ...) of every alive node."""
    import ray

    return [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]


def fit_resources(nodes: list[dict[str, float]], cpus_per_task: int = 1, mem_per_task_gb: float | None = None) -> float:
    """The Ray memory (GB) one task asks for; raise ``RayResourceError`` when it fits on no node.

    Default: datatrove's 2 GB per CPU, lowered to what the largest node offers per CPU, so a small
    cluster (a laptop, a CI runner) runs instead of waiting forever.
    """
    if not nodes:
        raise RayResourceError("the Ray cluster has no alive node")
    if mem_per_task_gb is None:
        per_cpu = max(n.get("memory", 0) / GIB / max(n.get("CPU", 0), 1) for n in nodes)
        mem_per_task_gb = round(min(DATATROVE_MEM_PER_CPU_GB, per_cpu) * cpus_per_task * 0.9, 3)
    need_mem = mem_per_task_gb * GIB
    if not any(n.get("CPU", 0) >= cpus_per_task and n.get("memory", 0) >= need_mem for n in nodes):
        largest = max(nodes, key=lambda n: (n.get("memory", 0), n.get("CPU", 0)))
        raise RayResourceError(
            f"a task asks {cpus_per_task} CPU and {mem_per_task_gb:.2f} GB of Ray memory, but no node has that "
            f"(largest: {largest.get('CPU', 0):g} CPU, {largest.get('memory', 0) / GIB:.2f} GB); "
            "Ray would wait forever: lower the memory per task or add a larger node"
        )
    return mem_per_task_gb


def _documents(stats: Any) -> int:
    """Documents a finished task read: the first step's ``documents`` (or ``total``) counter."""
    if not isinstance(stats, list):
        return 0
    for key in ("documents", "total"):
        for step in stats:
            value = step.get("stats", {}).get(key) if isinstance(step, dict) else None
            if value is not None:
                return int(value.get("total", 0) if isinstance(value, dict) else value)
    return 0


class StageProgress:
    """Prints ``stage: done/total tasks, N docs/s`` while a stage runs, from its files on disk."""

    def __init__(self, folder: StageFolder, stage: str, total: int, every: float = 5.0):
        self.folder, self.stage, self.total, self.every = folder, stage, total, every
        self._stop = threading.Event()
        self._seen: dict[str, int] = {}
        self._start = time.time()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _poll(self) -> tuple[int, int]:
        try:
            done = len(self.folder.list_files("completions"))
            names = self.folder.list_files("stats", glob_pattern="*.json")
        except OSError:
            return 0, sum(self._seen.values())
        for name in names:
            if name not in self._seen:
                try:
                    with self.folder.open(name, "r") as f:
                        self._seen[name] = _documents(json.load(f))
                except (OSError, ValueError):
                    continue
        return done, sum(self._seen.values())

    def line(self) -> str:
        done, docs = self._poll()
        elapsed = max(time.time() - self._start, 1e-9)
        return f"[ray] {self.stage}: {done}/{self.total} tasks, {docs} documents, {docs / elapsed:.1f} docs/s"

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            print(self.line(), flush=True)

    def __enter__(self) -> StageProgress:
        try:  # tasks finished by an earlier run count as done, their documents not as this run's speed
            self._seen = {name: 0 for name in self.folder.list_files("stats", glob_pattern="*.json")}
        except OSError:
            self._seen = {}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        print(self.line(), flush=True)


class CheckedRayExecutor(RayPipelineExecutor):
    """``RayPipelineExecutor`` that checks resources first, reports progress and fails loudly."""

    def __init__(self, *args: Any, stage: str = "stage", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stage = stage

    def run(self) -> None:
        fit_resources(alive_nodes(), self.cpus_per_task, self.mem_per_cpu_gb * self.cpus_per_task)
        with StageProgress(self.logging_dir, self.stage, self.world_size):
            super().run()
        missing = self.get_incomplete_ranks(range(self.world_size), skip_completed=True)
        if missing:
            raise RayTasksFailed(
                f"{self.stage}: {len(missing)}/{self.world_size} Ray tasks did not complete "
                f"(first: {missing[:5]}); see logs/{self.stage}/ and rerun the same command to resume"
            )


def ray_executor(
    pipeline: list,
    tasks: int,
    workers: int,
    logging_dir: StageFolder,
    ray_address: str | None = None,
    cpus_per_task: int = 1,
    mem_per_task_gb: float | None = None,
    tasks_per_job: int = 1,
    workers_set: bool = True,
    **_: Any,
) -> CheckedRayExecutor:
    """The ``ray`` entry of ``EXECUTORS``: connect, size the tasks to the cluster, build the executor.

    ``workers`` caps the tasks in flight when given (``workers_set``); otherwise the cluster's CPUs
    do, not the driver's.
    """
    resources = connect(ray_address)
    mem = fit_resources(alive_nodes(), cpus_per_task, mem_per_task_gb)
    if not workers_set:
        workers = max(1, int(resources.get("CPU", 1) // cpus_per_task))
    return CheckedRayExecutor(
        pipeline=pipeline,
        tasks=tasks,
        workers=max(1, min(workers, tasks)),
        logging_dir=logging_dir,
        skip_completed=True,
        cpus_per_task=cpus_per_task,
        mem_per_cpu_gb=mem / cpus_per_task,
        tasks_per_job=tasks_per_job,
        stage=logging_dir.stage,
    )
