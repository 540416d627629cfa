"""Slurm from the submitting side, for every room that submits jobs (curation arrays, training): the
client commands on ``PATH``, the partitions ``sinfo`` reports, and Slurm's time-limit syntax.

Each problem is a ``SlurmError`` (a ``ConfigError``: one line, exit 2), raised before anything is submitted.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.config import ConfigError

REPO = Path(__file__).resolve().parents[1]  # common/slurm.py -> the project root
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE")  # fmt: skip
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "scontrol")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SlurmError(ConfigError):
    """Slurm is missing or would refuse (or never run) the submission: nothing was submitted."""


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_seconds: float  # math.inf when the partition has no limit
    cpus: int  # of its largest node
    memory_mb: int  # of its largest node


def parse_time(text: str, flag: str = "--slurm-time") -> int:
    """A Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) in seconds."""
    match = _TIME.match(text.strip())
    if not match or text.strip() in ("", "0"):
        raise SlurmError(f"{flag} {text!r}: not a Slurm time limit (MM, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = (int(g) if g is not None else None for g in match.groups())
    if days is None:  # MM, MM:SS, HH:MM:SS
        parts = [p for p in (a, b, c) if p is not None]
        h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
        return h * 3600 + m * 60 + s
    return days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)


def sbatch_directives(args: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--sbatch-arg`` values ``("account=abc", "exclusive")`` -> ``{"account": "abc", "exclusive": ""}``
    (each one an ``#SBATCH --KEY[=VALUE]`` line)."""
    out = {}
    for arg in args:
        key, _, value = arg.lstrip("-").partition("=")
        if not key:
            raise SlurmError(f"--sbatch-arg {arg!r}: expected KEY or KEY=VALUE")
        out[key] = value
    return out


def format_time(seconds: float) -> str:
    """``H:MM:SS`` (hours unbounded)."""
    seconds = math.ceil(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def require_clients() -> None:
    missing = [cmd for cmd in CLIENTS if shutil.which(cmd) is None]
    if missing:
        raise SlurmError(f"no Slurm on this machine: {', '.join(missing)} not found on PATH")


def partitions() -> list[Partition]:
    """The partitions ``sinfo`` reports (one row per partition and node shape; the largest shape kept)."""
    require_clients()
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P|%l|%c|%m"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise SlurmError("sinfo did not answer in 30 s: is slurmctld reachable?") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmError(f"sinfo failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    found: dict[str, Partition] = {}
    for line in proc.stdout.splitlines():
        name, limit, cpus, memory = line.strip().split("|")
        default, name = name.endswith("*"), name.rstrip("*")
        max_seconds = math.inf if limit in ("infinite", "n/a") else parse_time(limit, "sinfo's limit")
        cpus_n, memory_n = int(cpus.rstrip("+")), int(memory.rstrip("+"))
        old = found.get(name)
        if old is not None:
            cpus_n, memory_n = max(cpus_n, old.cpus), max(memory_n, old.memory_mb)
        found[name] = Partition(name, default, max_seconds, cpus_n, memory_n)
    return list(found.values())


def choose_partition(name: str | None, flag: str = "--slurm-partition") -> Partition:
    """The named partition, or the cluster's default one."""
    known = partitions()
    if not known:
        raise SlurmError("sinfo lists no partition")
    if name is None:
        defaults = [p for p in known if p.default]
        if not defaults:
            raise SlurmError(f"the cluster has no default partition: give {flag}")
        return defaults[0]
    for partition in known:
        if partition.name == name:
            return partition
    raise SlurmError(f"unknown partition {name!r}; available: {', '.join(p.name for p in known)}")


def check_time_limit(text: str, partition: Partition, flag: str = "--slurm-time") -> int:
    """``text`` in seconds, refused when longer than the partition allows (the job would never start)."""
    limit = parse_time(text, flag)
    if limit > partition.max_seconds:
        raise SlurmError(
            f"{flag} {text} exceeds partition {partition.name}'s limit {format_time(partition.max_seconds)}"
        )
    return limit


def job_environment() -> str:
    """A job script's lines that run this project with this interpreter: its ``bin/`` first on ``PATH``
    (``launch_pickled_pipeline``, ``python``) and the project root on ``PYTHONPATH`` (both on storage
    every node mounts at the same path)."""
    bindir = Path(sys.executable).parent
    return f'export PATH="{bindir}:$PATH"\nexport PYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}"'


def job_state(job_id: str) -> str | None:
    """``JobState`` of ``job_id`` from ``scontrol`` (``RUNNING``, ``COMPLETED``, ...); None once it is purged."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=60)
    match = re.search(r"\bJobState=(\S+)", proc.stdout)
    return match.group(1) if proc.returncode == 0 and match else None


def wait_for_job(job_id: str, poll_s: float = 2.0) -> str | None:
    """Until ``job_id`` reaches a terminal state (a requeued job passes ``PENDING`` again); that state."""
    while True:
        state = job_state(job_id)
        if state is None or state in TERMINAL:
            return state
        time.sleep(poll_s)


class SubmissionDeclined(RuntimeError):
    """The user answered no to the cost line: nothing was submitted."""


def confirm_submission(cost_line: str, yes: bool) -> None:
    """Print the cost line; at a terminal, submit only on ``y`` (``--yes`` answers for the user). A run
    without a terminal (a script, a CI job, the ``--detach`` driver) was asked for in advance: it goes on."""
    print(cost_line, flush=True)
    if yes or not sys.stdin.isatty():
        return
    try:
        answer = input("submit? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise SubmissionDeclined("not submitted: the cost was not confirmed (answer y, or pass --yes)")


def submit_script(script: str, options: list[str]) -> str:
    """``sbatch --parsable [options]`` with ``script`` on stdin (or a path in ``options``); the job id. A refusal
    is a ``SlurmError`` with sbatch's last line."""
    proc = subprocess.run(["sbatch", "--parsable", *options], input=script, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise SlurmError(f"sbatch refused the job: {lines[-1] if lines else proc.returncode}")
    return proc.stdout.strip().split(";")[0]
