"""``pipelines.run --executor slurm``: its flags, its checks before any write, and ``--detach``.

``--detach`` submits the driver itself as a one-CPU Slurm job (the same command without ``--detach``):
it submits the stages' arrays one after the other, retries, merges the stats and writes the report, while
the submitting shell returns at once with the commands that show its progress.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from common.slurm import SlurmError, job_environment, require_clients, submit_script
from common.slurm_arrays import SlurmOptions, add_array_arguments, array_options
from pipelines.slurm_cluster.cluster import check_submission
from pipelines.slurm_cluster.cost import BUNDLED, measured_cost
from pipelines.sources import ResolvedSource

DRIVER_MEM_MB = 2048


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("with --executor slurm (each stage a job array; see 'On a Slurm cluster')")
    add_array_arguments(group)
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
    return array_options(args)


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
    cmd = ["--job-name=cc2model-driver", "--cpus-per-task=1", f"--mem={DRIVER_MEM_MB}M",
           f"--output={logs}/slurm-driver-%j.out"]  # fmt: skip
    if options.partition:
        cmd.append(f"--partition={options.partition}")
    job = submit_script(script, cmd)
    print(f"submitted the driver as Slurm job {job}")
    print(f"progress: tail -f {logs}/slurm-driver-{job}.out   (queue: squeue -j {job}; stop: scancel {job})")
    print(f"after it ends: {shlex.join(['python', '-m', 'pipelines.run', *argv])} resumes what did not complete")
    return 0
