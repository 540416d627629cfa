"""A CLI whose work is one process (``mixtures.build``) run on a Slurm cluster: ``--executor slurm`` submits
the same command, without the Slurm flags, as one job of as many CPUs as the command uses, after the cost line;
the submitting command then follows the job's log until the job ends (exit 0 when it completed), or with
``--detach`` returns at once with the commands that follow it.

The job starts in the submitting directory (relative paths mean the same) with this interpreter and this
project (``common.slurm.job_environment``): both, and every input and output, on storage the nodes mount.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from common.cli import GB_PER_CPU
from common.slurm import (
    TERMINAL,
    SlurmError,
    SubmissionDeclined,
    confirm_submission,
    format_time,
    job_environment,
    job_state,
    parse_time,
    submit_script,
)
from common.slurm_arrays import SlurmOptions, check_array_resources

POLL_S = 1.0
# flags of this module (with a value / without): removed from the command the job runs
VALUED = ("--executor", "--slurm-partition", "--slurm-time", "--slurm-mem-per-cpu", "--sbatch-arg")
PLAIN = ("--detach", "--yes")


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("local", "slurm"), default="local", help="where the work runs")
    group = parser.add_argument_group("with --executor slurm (the command as one Slurm job)")
    group.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's default)")
    group.add_argument("--slurm-time", default="04:00:00", help="time limit of the job (default: 04:00:00)")
    group.add_argument(
        "--slurm-mem-per-cpu", type=GB_PER_CPU, default=2.0, metavar="GB", help="GB per CPU (default: 2)"
    )
    group.add_argument(
        "--sbatch-arg", action="append", default=[], metavar="KEY[=VALUE]", help="extra #SBATCH option (repeatable)"
    )
    group.add_argument("--yes", action="store_true", help="submit without asking after the cost line")
    group.add_argument("--detach", action="store_true", help="submit and return (prints how to follow the job)")


def job_options(args: argparse.Namespace, cpus: int) -> SlurmOptions:
    """The flags as ``SlurmOptions`` for a job of ``cpus`` CPUs, checked against the cluster (one-line
    ``SlurmError``s, nothing submitted)."""
    options = SlurmOptions(args.slurm_partition, args.slurm_time, cpus, args.slurm_mem_per_cpu, tuple(args.sbatch_arg))
    if not options.mem_per_cpu_gb > 0:
        raise SlurmError("--slurm-mem-per-cpu must be > 0 (GB)")
    check_array_resources(options)
    return options


def job_command(module: str, argv: list[str]) -> list[str]:
    """``python -m module argv`` without this module's flags: what the job runs."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in VALUED:
            skip = "=" not in arg
            continue
        if name not in PLAIN:
            kept.append(arg)
    return [sys.executable, "-m", module, *kept]


def _follow(log: Path, job: str) -> str | None:
    """Copy the job's log to stdout as it grows, until the job ends; its final state."""
    position = 0
    while True:
        state = job_state(job)
        if log.exists():
            with log.open("r", errors="replace") as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
            print(chunk, end="", flush=True)
        if state is None or state in TERMINAL:
            return state
        time.sleep(POLL_S)


def run_as_job(module: str, argv: list[str], options: SlurmOptions, logs: Path, yes: bool, detach: bool) -> int:
    """Submit ``python -m module argv`` (less the Slurm flags) as one job; 0 when it completed (or detached)."""
    limit = parse_time(options.time)
    try:
        confirm_submission(
            f"[slurm] cost: 1 job x {options.cpus_per_task} CPU x --slurm-time {format_time(limit)}: at most "
            f"{options.cpus_per_task * limit / 3600:,.3g} CPU-hours reserved",
            yes,
        )
    except SubmissionDeclined as err:
        print(err, file=sys.stderr)
        return 1
    logs.mkdir(parents=True, exist_ok=True)
    name = module.rsplit(".", 1)[-1]
    script = f"#!/bin/bash\n{job_environment()}\nexec {shlex.join(job_command(module, argv))}\n"
    directives = [f"--job-name=cc2model-{name}", f"--cpus-per-task={options.cpus_per_task}",
                  f"--mem-per-cpu={int(options.mem_per_cpu_gb * 1024)}M", f"--time={options.time}",
                  f"--output={logs}/{name}-%j.out"]  # fmt: skip
    if options.partition:
        directives.append(f"--partition={options.partition}")
    directives += [f"--{k}={v}" if v else f"--{k}" for k, v in options.sbatch_dict().items()]
    job = submit_script(script, directives)
    log = logs / f"{name}-{job}.out"
    print(f"[slurm] submitted {module} as Slurm job {job}; log: {log}", flush=True)
    if detach:
        print(f"progress: tail -f {log}   (queue: squeue -j {job}; stop: scancel {job})")
        return 0
    state = _follow(log, job)
    if state != "COMPLETED":
        print(f"error: Slurm job {job} ended {state or 'without a state'}; its log: {log}", file=sys.stderr)
        return 1
    return 0
