"""What a curation submission needs from the Slurm cluster (``common.slurm`` has the generic checks): a time
limit not shorter than one curate task's estimate (``cost.py``), and CPUs and memory that fit one of the partition's
nodes. Each failure is a ``SlurmError``: one line, exit 2, nothing submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.slurm import Partition, SlurmError, check_time_limit, choose_partition, format_time, sbatch_directives
from pipelines.slurm_cluster.cost import BUNDLED, CurationCost, DocumentCost, curation_cost, largest_task_bytes


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


def check_submission(
    options: SlurmOptions, paths: list[str], tasks: int, cost: DocumentCost = BUNDLED
) -> tuple[Partition, str]:
    """Every check of the module docstring; the partition the arrays go to and the submission's cost line
    (``cost.CurationCost``)."""
    partition = choose_partition(options.partition)
    limit = check_time_limit(options.time, partition)
    estimate = largest_task_bytes(paths, tasks) / 1e6 * cost.seconds_per_mb / options.cpus_per_task
    if limit < estimate:
        raise SlurmError(
            f"--slurm-time {options.time} is shorter than one curate task's estimate {format_time(estimate)} "
            f"({cost.seconds_per_mb:.2g} s per MB of WARC); raise --slurm-time or use more --tasks"
        )
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
    planned: CurationCost = curation_cost(paths, tasks, options.cpus_per_task, limit, cost)
    return partition, planned.line(estimate)
