"""``pipelines.run --executor slurm``: its flags, its checks before any write, and ``--detach``.

``--detach`` submits the driver itself as a one-CPU Slurm job (the same command without ``--detach``):
it submits the stages' arrays one after the other, retries, merges the stats and writes the report, while
the submitting shell returns at once with the commands that show its progress.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from common.slurm import SlurmError, job_environment, require_clients, sbatch_directives
from pipelines.slurm_cluster.cluster import SlurmOptions, check_submission
from pipelines.slurm_cluster.cost import BUNDLED, measured_cost
from pipelines.sources import ResolvedSource

DRIVER_MEM_MB = 2048


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("with --executor slurm (each stage a job array; see 'On a Slurm cluster')")
    group.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's default)")
    group.add_argument("--slurm-time", default="04:00:00", help="time limit of one array task (default: 04:00:00)")
    group.add_argument("--slurm-cpus-per-task", type=int, default=1, help="CPUs per array task (default: 1)")
    group.add_argument("--slurm-mem-per-cpu", type=float, default=2.0, metavar="GB", help="GB per CPU (default: 2)")
    group.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="KEY[=VALUE]",
        help="extra #SBATCH option for every array, e.g. account=abc, qos=high, exclusive (repeatable)",
    )
    group.add_argument(
        "--slurm-retries", type=int, default=1, help="resubmissions of the tasks that did not complete (default: 1)"
    )
    group.add_argument(
        "--cost-from",
        default=None,
        metavar="RUN_DIR",
        help="a finished run of the same recipe whose measured per-document cost the cost line uses "
        "(default: the bundled figure)",
    )
    group.add_argument(
        "--yes", action="store_true", help="submit without asking after the cost line (asked only at a terminal)"
    )
    group.add_argument(
        "--detach", action="store_true", help="submit the driver as a Slurm job and return (prints how to follow it)"
    )


def slurm_options(args: argparse.Namespace) -> SlurmOptions:
    """The flags as ``SlurmOptions``; counts checked (one-line errors)."""
    if args.slurm_cpus_per_task < 1:
        raise SlurmError(f"--slurm-cpus-per-task must be >= 1, got {args.slurm_cpus_per_task}")
    if not args.slurm_mem_per_cpu > 0:
        raise SlurmError("--slurm-mem-per-cpu must be > 0 (GB)")
    if args.slurm_retries < 0:
        raise SlurmError(f"--slurm-retries must be >= 0, got {args.slurm_retries}")
    sbatch_directives(args.sbatch_arg)  # a malformed one refused now, not at submission
    return SlurmOptions(
        partition=args.slurm_partition,
        time=args.slurm_time,
        cpus_per_task=args.slurm_cpus_per_task,
        mem_per_cpu_gb=args.slurm_mem_per_cpu,
        sbatch_args=tuple(args.sbatch_arg),
        retries=args.slurm_retries,
    )


def check_args(args: argparse.Namespace, source: ResolvedSource, tasks: int, recipe: dict) -> str | None:
    """Before anything is written: Slurm flags without ``--executor slurm`` are refused, and with it the
    cluster checks of ``cluster.check_submission``; the submission's cost line (``cost.py``)."""
    if args.executor != "slurm":
        for flag, given in (("--detach", args.detach), ("--cost-from", args.cost_from), ("--yes", args.yes)):
            if given:
                raise SlurmError(f"{flag} needs --executor slurm")
        return None
    if args.train:
        raise SlurmError("--train with --executor slurm: curate here, then train with python -m trainer.slurm")
    cost = measured_cost(args.cost_from, recipe) if args.cost_from else BUNDLED
    paths = [os.path.join(source.base, path) for path in source.paths]
    return check_submission(slurm_options(args), paths, tasks, cost)[1]


def submit_driver(argv: list[str], args: argparse.Namespace, run_root: Path) -> int:
    """``sbatch`` the same command without ``--detach``; print the job id and how to follow it."""
    require_clients()
    options = slurm_options(args)
    logs = run_root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = shlex.join([sys.executable, "-m", "pipelines.run", *(a for a in argv if a != "--detach")])
    script = f"#!/bin/bash\n{job_environment()}\nexec {command}\n"
    cmd = ["sbatch", "--parsable", "--job-name=cc2model-driver", "--cpus-per-task=1", f"--mem={DRIVER_MEM_MB}M",
           f"--output={logs}/slurm-driver-%j.out"]  # fmt: skip
    if options.partition:
        cmd.append(f"--partition={options.partition}")
    proc = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise SlurmError(f"sbatch refused the driver job: {lines[-1] if lines else proc.returncode}")
    job = proc.stdout.strip().split(";")[0]
    print(f"submitted the driver as Slurm job {job}")
    print(f"progress: tail -f {logs}/slurm-driver-{job}.out   (queue: squeue -j {job}; stop: scancel {job})")
    print(f"after it ends: {shlex.join(['python', '-m', 'pipelines.run', *argv])} resumes what did not complete")
    return 0
