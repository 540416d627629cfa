"""The ``ray`` executor: datatrove's ``RayPipelineExecutor`` (one Ray task per datatrove task, resubmitted
when its worker dies: the local executor's output and resume rule) with what a cluster run needs:

- a resource check before any work: datatrove asks ``mem_per_cpu_gb`` (2 GB) of Ray memory per CPU
  and, when no node has that much, waits on its placement group forever, silently. The default
  memory is derived from the cluster found, and a request no node can hold is a one-line error;
- console progress per stage (tasks done / total, documents per second), read from the stage's
  completion and stats files on the (shared) run directory;
- a failure when a task did not complete (datatrove only logs a warning).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datatrove.executor.ray import RayPipelineExecutor
from datatrove.io import DataFolder, DataFolderLike

from common.cli import MAX_TASK_MB, NODE_CPUS, real
from common.executor_errors import ExecutorError, raise_if_incomplete

REPO = Path(__file__).resolve().parents[2]  # common/ray_cluster/executor.py -> the project root
GIB = 1024**3
DATATROVE_MEM_PER_CPU_GB = 2.0
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class RayOptions:
    """The cluster and what a task reserves: ``--ray-address``, ``--ray-cpus-per-task``, ``--ray-memory-per-task``."""

    address: str | None = None
    cpus_per_task: int = 1
    mem_per_task_gb: float | None = None


class RayResourceError(ExecutorError):
    """A task's resource request fits on no alive node of the cluster."""


class RayTasksFailed(ExecutorError):
    """Some tasks of a stage did not complete (after datatrove's resubmissions)."""


def connect(address: str | None = None) -> dict[str, Any]:
    """Join the cluster at ``address``, or start a private Ray instance for this driver; one line says which.

    Which cluster: ``HOST:PORT`` / ``ray://...`` that one; ``auto`` as ``ray.init(address="auto")`` (``RAY_ADDRESS``,
    else a cluster started with ``ray start`` on this machine); ``local`` a private instance on 127.0.0.1.
    Without an address: ``RAY_ADDRESS`` when set (Ray's variable for "this job's cluster"), else a private
    instance; never a cluster that merely runs on the machine (another user's or job's, as ``auto`` would).
    Workers import this project's modules, so the project root goes on their ``PYTHONPATH``
    (on a multi-node cluster the project must sit at the same path on every node: shared storage).
    A Ray auth token, when one is available, turns token mode on first (``common/ray_cluster/auth.py``).
    """
    import ray

    from common.ray_cluster.auth import enable_for_this_process

    if not ray.is_initialized():
        enable_for_this_process()
        env_vars = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        options = {"ignore_reinit_error": True, "runtime_env": {"env_vars": env_vars}, "log_to_driver": True}
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        if target == "local":
            start_local(**options)
            joined = "started a private Ray instance (127.0.0.1 only, stopped with this run) at"
        else:
            ray.init(address=target, **options)
            joined = "joined the Ray cluster at"
        print(f"ray: {joined} {ray.get_runtime_context().gcs_address}", flush=True)
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


class Progress:
    """``[ray] stage: done/total tasks, N documents, X docs/s``: the line a stage or a map of Ray tasks prints."""

    every = PROGRESS_EVERY_S

    def __init__(self, stage: str, total: int):
        self.stage, self.total, self.done, self.docs = stage, total, 0, 0
        self.start = self.last = time.time()

    def report(self) -> None:
        rate = f"{self.docs / max(time.time() - self.start, 1e-9):.1f}"
        print(f"[ray] {self.stage}: {self.done}/{self.total} tasks, {self.docs} documents, {rate} docs/s", flush=True)
        self.last = time.time()

    def tick(self) -> None:
        """``report`` at most every ``every`` seconds."""
        if time.time() - self.last >= self.every:
            self.report()


class StageProgress(Progress):
    """A datatrove stage's progress, read every few seconds by a thread from its files on the run directory."""

    def __init__(self, folder: DataFolder, stage: str, total: int):
        super().__init__(stage, total)
        self.folder = folder
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _poll(self) -> None:
        try:
            done = len(self.folder.list_files("completions"))
            names = self.folder.list_files("stats", glob_pattern="*.json")
        except OSError:
            done, names = 0, []
        for name in names:
            if name not in self._seen:
                try:
                    with self.folder.open(name, "r") as f:
                        self._seen[name] = _documents(json.load(f))
                except (OSError, ValueError):
                    continue
        self.done, self.docs = done, sum(self._seen.values())

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._poll()
            self.report()

    def __enter__(self) -> StageProgress:
        try:  # tasks finished by an earlier run count as done, their documents not as this run's speed
            self._seen = {name: 0 for name in self.folder.list_files("stats", glob_pattern="*.json")}
        except OSError:
            self._seen = {}
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()
        self.report()


class CheckedRayExecutor(RayPipelineExecutor):
    """``RayPipelineExecutor`` that reports progress and fails loudly, naming its ``stage``."""

    def __init__(self, *args: Any, stage: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stage = stage

    def run(self) -> None:
        stage = self.stage
        with StageProgress(self.logging_dir, stage, self.world_size):
            super().run()
        hint = f"see logs/{stage}/ and rerun the same command to resume"
        raise_if_incomplete(self, stage, RayTasksFailed, "Ray tasks", hint)


def ray_executor(
    pipeline: list,
    tasks: int,
    workers: int,
    logging_dir: DataFolderLike,
    ray: RayOptions,
    workers_set: bool = True,
    stage: str | None = None,
) -> CheckedRayExecutor:
    """The ``ray`` executor of one stage: connect, size the tasks to the cluster, build the executor.

    ``workers`` caps the tasks in flight when given (``workers_set``); else the cluster's CPUs do, not the driver's.
    ``stage`` names it in progress lines and errors (default: the ``stage`` of a ``pipelines`` ``StageFolder``).
    """
    resources = connect(ray.address)
    cpus = ray.cpus_per_task
    mem = fit_resources(alive_nodes(), cpus, ray.mem_per_task_gb)
    if not workers_set:
        workers = max(1, int(resources.get("CPU", 1) // cpus))
    return CheckedRayExecutor(
        pipeline,
        tasks,
        max(1, min(workers, tasks)),
        logging_dir=logging_dir,
        cpus_per_task=cpus,
        mem_per_cpu_gb=mem / cpus,
        stage=stage or logging_dir.stage,  # type: ignore[union-attr]
    )


def add_ray_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--ray-address``, ``--ray-cpus-per-task``, ``--ray-memory-per-task``: every CLI with ``--executor ray``."""
    parser.add_argument(
        "--ray-address",
        default=None,
        help="with --executor ray: the cluster to join, HOST:PORT (or auto: as ray.init, RAY_ADDRESS else a "
        "cluster started on this machine; local: a private instance); default: RAY_ADDRESS when set, else a "
        "private Ray instance on 127.0.0.1 that stops with the run (never another job's cluster)",
    )
    parser.add_argument(
        "--ray-cpus-per-task",
        type=NODE_CPUS,
        default=1,
        help="with --executor ray: CPUs each Ray task reserves (default: 1)",
    )
    parser.add_argument(
        "--ray-memory-per-task",
        type=real(0, MAX_TASK_MB / 1024, open_low=True),
        default=None,
        metavar="GB",
        help="with --executor ray: Ray memory each task reserves, in GB (default: datatrove's 2 GB per CPU, "
        "lowered to what the largest node offers); a request no node can hold is an error before any work",
    )


def ray_options(args: argparse.Namespace) -> RayOptions:
    """The parsed ``add_ray_arguments``, checked (a ``ValueError`` naming the flag)."""
    if args.ray_cpus_per_task < 1:
        raise ValueError(f"--ray-cpus-per-task must be >= 1, got {args.ray_cpus_per_task}")
    if args.ray_memory_per_task is not None and not 0 < args.ray_memory_per_task < float("inf"):  # nan too
        raise ValueError("--ray-memory-per-task must be > 0 (GB)")
    return RayOptions(args.ray_address, args.ray_cpus_per_task, args.ray_memory_per_task)
