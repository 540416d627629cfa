"""Slurm job arrays for the datatrove stages of every room (curation, ``dedup.run``): datatrove's
``SlurmPipelineExecutor`` (one job array per stage, one array task per datatrove task, the pipeline pickled
into the stage's logs and run by ``launch_pickled_pipeline``) with what a run needs around it:

- the job runs this project with this Python: the script puts the interpreter's ``bin/`` first on ``PATH``
  and the project root on ``PYTHONPATH`` (the project and the run directory sit on a shared file system);
- the driver waits for the array, printing ``[slurm] <stage>: done/total tasks, R running, P pending``
  from the completions and the queue, then resubmits the tasks that did not complete (``retries``
  times) and fails with one line when some still did not;
- a rerun submits only the incomplete tasks, and first waits for the jobs an earlier driver submitted
  that are still queued (``logs/<stage>/slurm_jobs.json``): their pending tasks would read the new
  ``ranks_to_run.json`` and run the wrong tasks.

Stats are merged by the caller at the end of the run (``pipelines.stats``), so datatrove's extra merge job
is not submitted. The flags (``add_array_arguments``) and the checks before submission
(``check_array_resources``) are the same in every CLI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field

from datatrove.executor.slurm import SlurmPipelineExecutor

from common.cli import GB_PER_CPU, NODE_CPUS, integer
from common.executor_errors import raise_if_incomplete
from common.slurm import (
    Partition,
    SlurmError,
    check_time_limit,
    choose_partition,
    job_environment,
    sbatch_directives,
)

POLL_S = 2.0
PROGRESS_EVERY_S = 10.0
JOBS_FILE = "slurm_jobs.json"


class SlurmTasksFailed(RuntimeError):
    """Some tasks of a stage did not complete after the retries: the CLIs print it as one line (exit 2)."""


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
        return sbatch_directives(self.sbatch_args)


def add_array_arguments(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """The flags of ``SlurmOptions``, the same in every CLI that runs stages as arrays."""
    group.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's default)")
    group.add_argument("--slurm-time", default="04:00:00", help="time limit of one array task (default: 04:00:00)")
    group.add_argument("--slurm-cpus-per-task", type=NODE_CPUS, default=1, help="CPUs per array task (default: 1)")
    group.add_argument(
        "--slurm-mem-per-cpu", type=GB_PER_CPU, default=2.0, metavar="GB", help="GB per CPU (default: 2)"
    )
    group.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="KEY[=VALUE]",
        help="extra #SBATCH option for every array, e.g. account=abc, qos=high, exclusive (repeatable)",
    )
    group.add_argument(
        "--slurm-retries",
        type=integer(0, 100),
        default=1,
        help="resubmissions of the tasks that did not complete (default: 1)",
    )


def array_options(args: argparse.Namespace) -> SlurmOptions:
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


def check_array_resources(options: SlurmOptions) -> tuple[Partition, int]:
    """The partition exists, the time limit is within its own, one task's CPUs and memory fit its largest node
    (each a ``SlurmError`` before anything is submitted); the partition and the limit in seconds."""
    partition = choose_partition(options.partition)
    limit = check_time_limit(options.time, partition)
    if options.cpus_per_task > partition.cpus:
        raise SlurmError(
            f"--slurm-cpus-per-task {options.cpus_per_task}: partition {partition.name}'s nodes have {partition.cpus}"
        )
    need_mb = options.mem_per_cpu_gb * 1024 * options.cpus_per_task
    if need_mb > partition.memory_mb:
        raise SlurmError(
            f"a task asks {need_mb / 1024:g} GB ({options.cpus_per_task} CPU x --slurm-mem-per-cpu "
            f"{options.mem_per_cpu_gb:g}), but partition {partition.name}'s largest node has "
            f"{partition.memory_mb / 1024:g} GB"
        )
    return partition, limit


def queued(job_ids: list[str]) -> Counter:
    """States (``PENDING``, ``RUNNING``, ...) of the array tasks of ``job_ids`` still in the queue."""
    if not job_ids:
        return Counter()
    proc = subprocess.run(
        ["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%T"], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:  # every id already purged from the controller: "Invalid job id specified"
        return Counter()
    return Counter(line.strip() for line in proc.stdout.splitlines() if line.strip())


def leave_enclosing_job() -> None:
    """Drop the ``SLURM_*`` / ``SBATCH_*`` variables of a job the driver itself runs in (``--detach``, ``salloc``):
    the arrays are submitted with ``--export=ALL``, and ``srun`` in them would read the driver's
    ``SLURM_MEM_PER_NODE`` next to their own ``SLURM_MEM_PER_CPU`` and refuse to start. ``SLURM_CONF`` stays."""
    for name in [n for n in os.environ if n.startswith(("SLURM_", "SBATCH_", "SRUN_")) and n != "SLURM_CONF"]:
        del os.environ[name]


class CheckedSlurmExecutor(SlurmPipelineExecutor):
    """``SlurmPipelineExecutor`` whose driver waits, reports, retries and fails loudly (module docstring)."""

    retries: int = 1
    stage: str = "stage"

    def get_sbatch_args(self, max_array: int = 1) -> dict:
        """datatrove's directives, memory in whole MB (Slurm reads no ``2.5G``), no ``--partition`` when none
        was named (the cluster's default)."""
        args = super().get_sbatch_args(max_array)
        args["mem-per-cpu"] = f"{int(self.mem_per_cpu_gb * 1024)}M"
        if self.partition is None:
            del args["partition"]
        return args

    def launch_merge_stats(self) -> None:
        """Not submitted: the caller merges the stages' stats after the run (module docstring)."""

    def _recorded_jobs(self) -> list[str]:
        try:
            with self.logging_dir.open(JOBS_FILE, "r") as f:
                return list(json.load(f))
        except (FileNotFoundError, ValueError):
            return []

    def _record_job(self, job_id: str) -> None:
        jobs = [*self._recorded_jobs(), str(job_id)]
        with self.logging_dir.open(JOBS_FILE, "w") as f:
            json.dump(jobs, f)

    def _done(self) -> int:
        return self.world_size - len(self.get_incomplete_ranks(range(self.world_size), skip_completed=True))

    def _report(self, stage: str, jobs: list[str], states: Counter) -> None:
        print(
            f"[slurm] {stage}: {self._done()}/{self.world_size} tasks done, {states.get('RUNNING', 0)} running, "
            f"{states.get('PENDING', 0)} pending (job {','.join(jobs)})",
            flush=True,
        )

    def _wait(self, stage: str, jobs: list[str]) -> None:
        """Until no task of ``jobs`` is queued; a progress line every ``PROGRESS_EVERY_S``."""
        last = 0.0
        while states := queued(jobs):
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                self._report(stage, jobs, states)
                last = time.monotonic()
            time.sleep(POLL_S)
        self._report(stage, jobs, Counter())

    def run(self) -> None:
        if "SLURM_ARRAY_TASK_ID" in os.environ:  # inside an array task: run this task's datatrove rank
            super().run()
            return
        leave_enclosing_job()
        stage = self.stage
        earlier = [job for job in self._recorded_jobs() if queued([job])]
        if earlier:
            print(f"[slurm] {stage}: waiting for job {','.join(earlier)} submitted by an earlier run", flush=True)
            self._wait(stage, earlier)
        for _attempt in range(self.retries + 1):
            if not self.get_incomplete_ranks(range(self.world_size), skip_completed=True):
                break
            self.job_id = None  # a new array, not one depending on the previous attempt's
            self.launch_job()
            self._record_job(self.job_id)
            self._wait(stage, [str(self.job_id)])
        hint = f"see logs/{stage}/slurm_logs/ and rerun the same command to resubmit them"
        raise_if_incomplete(self, stage, SlurmTasksFailed, "Slurm tasks", hint)


def array_executor(
    pipeline: list,
    tasks: int,
    workers: int,
    logging_dir,  # a datatrove DataFolder or a path: the stage's logs, completions and pickled pipeline
    stage: str,
    slurm: SlurmOptions,
    workers_set: bool = False,
) -> CheckedSlurmExecutor:
    """One job array for the stage ``stage``, ``workers`` tasks at once when given (``%N`` on the array),
    else as many as the cluster schedules."""
    executor = CheckedSlurmExecutor(
        pipeline,
        tasks,
        time=slurm.time,
        partition=slurm.partition,
        cpus_per_task=slurm.cpus_per_task,
        mem_per_cpu_gb=slurm.mem_per_cpu_gb,
        workers=min(workers, tasks) if workers_set else -1,
        job_name=f"cc2model-{stage}",
        qos="",
        env_command=job_environment(),
        sbatch_args=slurm.sbatch_dict(),
        logging_dir=logging_dir,
        mail_type="NONE",
    )
    executor.retries = slurm.retries
    executor.stage = stage
    return executor
