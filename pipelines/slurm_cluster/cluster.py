"""What a submission needs from the Slurm cluster, checked before anything is written or submitted.

The client commands on ``PATH``, a controller that answers, the partition (named, or the cluster's
default), a time limit Slurm can parse that the partition allows and that is not shorter than one task's
estimate, and a request (CPUs, memory) that fits on one of the partition's nodes. Each failure is a
``SlurmSubmitError``: one line, exit 2, nothing submitted.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from pipelines.errors import ExecutorError

CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")
# One curate task's CPU time per MB of compressed WARC: the bundled sample (1.14 MB, 270 HTML pages) took
# 6.2 s of step time on one core of the development machine; a Common Crawl WARC (~1 GB) ~1.5 h.
CURATE_SECONDS_PER_MB = 5.0
REMOTE_WARC_BYTES = 10**9  # a Common Crawl WARC file, when its size is not known without a request
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SlurmSubmitError(ExecutorError):
    """Slurm is missing or would refuse (or never run) the submission: nothing was submitted."""


@dataclass(frozen=True)
class SlurmOptions:
    """``--slurm-partition``, ``--slurm-time``, ``--slurm-cpus-per-task``, ``--slurm-mem-per-cpu`` (GB),
    ``--sbatch-arg KEY[=VALUE]`` (repeatable), ``--slurm-retries``."""

    partition: str | None = None
    time: str = "04:00:00"
    cpus_per_task: int = 1
    mem_per_cpu_gb: float = 2.0
    sbatch_args: tuple[str, ...] = field(default_factory=tuple)
    retries: int = 1

    def sbatch_dict(self) -> dict[str, str]:
        """``("account=abc", "exclusive")`` -> ``{"account": "abc", "exclusive": ""}`` (``#SBATCH --KEY[=VALUE]``)."""
        out = {}
        for arg in self.sbatch_args:
            key, _, value = arg.lstrip("-").partition("=")
            out[key] = value
        return out


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_seconds: float  # math.inf when the partition has no limit
    cpus: int  # of its largest node
    memory_mb: int  # of its largest node


def parse_time(text: str) -> int:
    """A Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) in seconds."""
    match = _TIME.match(text.strip())
    if not match or text.strip() in ("", "0"):
        raise SlurmSubmitError(f"--slurm-time {text!r}: not a Slurm time limit (MM, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = (int(g) if g is not None else None for g in match.groups())
    if days is None:  # MM, MM:SS, HH:MM:SS
        parts = [p for p in (a, b, c) if p is not None]
        h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
        return h * 3600 + m * 60 + s
    return days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)


def _format(seconds: float) -> str:
    seconds = math.ceil(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def require_clients() -> None:
    missing = [cmd for cmd in CLIENTS if shutil.which(cmd) is None]
    if missing:
        raise SlurmSubmitError(f"no Slurm on this machine: {', '.join(missing)} not found on PATH")


def partitions() -> list[Partition]:
    """The partitions ``sinfo`` reports (one row per partition and node shape; the largest shape kept)."""
    require_clients()
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P|%l|%c|%m"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise SlurmSubmitError("sinfo did not answer in 30 s: is slurmctld reachable?") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmSubmitError(f"sinfo failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    found: dict[str, Partition] = {}
    for line in proc.stdout.splitlines():
        name, limit, cpus, memory = line.strip().split("|")
        default, name = name.endswith("*"), name.rstrip("*")
        max_seconds = math.inf if limit in ("infinite", "n/a") else parse_time(limit)
        cpus_n, memory_n = int(cpus.rstrip("+")), int(memory.rstrip("+"))
        old = found.get(name)
        if old is not None:
            cpus_n, memory_n = max(cpus_n, old.cpus), max(memory_n, old.memory_mb)
        found[name] = Partition(name, default, max_seconds, cpus_n, memory_n)
    return list(found.values())


def choose_partition(name: str | None) -> Partition:
    """The named partition, or the cluster's default one."""
    known = partitions()
    if not known:
        raise SlurmSubmitError("sinfo lists no partition")
    if name is None:
        defaults = [p for p in known if p.default]
        if not defaults:
            raise SlurmSubmitError("the cluster has no default partition: give --slurm-partition")
        return defaults[0]
    for partition in known:
        if partition.name == name:
            return partition
    raise SlurmSubmitError(f"unknown partition {name!r}; available: {', '.join(p.name for p in known)}")


def largest_task_bytes(paths: list[str], tasks: int) -> int:
    """Compressed WARC bytes of the heaviest task (datatrove gives task r the files r, r + tasks, ...)."""
    sizes = [os.path.getsize(p) if os.path.exists(p) else REMOTE_WARC_BYTES for p in paths]
    return max((sum(sizes[r::tasks]) for r in range(tasks)), default=0)


def check_submission(options: SlurmOptions, paths: list[str], tasks: int) -> Partition:
    """Every check of the module docstring; the partition the arrays go to."""
    limit = parse_time(options.time)
    partition = choose_partition(options.partition)
    if limit > partition.max_seconds:
        raise SlurmSubmitError(
            f"--slurm-time {options.time} exceeds partition {partition.name}'s limit {_format(partition.max_seconds)}"
        )
    estimate = largest_task_bytes(paths, tasks) / 1e6 * CURATE_SECONDS_PER_MB / options.cpus_per_task
    if limit < estimate:
        raise SlurmSubmitError(
            f"--slurm-time {options.time} is shorter than one curate task's estimate {_format(estimate)} "
            f"({CURATE_SECONDS_PER_MB:g} s per MB of WARC); raise --slurm-time or use more --tasks"
        )
    if options.cpus_per_task > partition.cpus:
        raise SlurmSubmitError(
            f"--slurm-cpus-per-task {options.cpus_per_task}: partition {partition.name}'s nodes have {partition.cpus}"
        )
    need_mb = options.mem_per_cpu_gb * 1024 * options.cpus_per_task
    if need_mb > partition.memory_mb:
        raise SlurmSubmitError(
            f"a task asks {need_mb / 1024:g} GB ({options.cpus_per_task} CPU x --slurm-mem-per-cpu "
            f"{options.mem_per_cpu_gb:g}), but partition {partition.name}'s largest node has "
            f"{partition.memory_mb / 1024:g} GB"
        )
    return partition
