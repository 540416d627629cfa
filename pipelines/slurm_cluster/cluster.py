"""What a curation submission needs from the Slurm cluster (``common.slurm`` has the generic checks): a time
limit not shorter than one curate task's estimate (``cost.py``), and CPUs and memory that fit one of the partition's
nodes. Each failure is a ``SlurmError``: one line, exit 2, nothing submitted.
"""

from __future__ import annotations

from common.slurm import Partition, SlurmError, format_time
from common.slurm_arrays import SlurmOptions, check_array_resources
from pipelines.slurm_cluster.cost import BUNDLED, CurationCost, DocumentCost, curation_cost, largest_task_bytes


def check_submission(
    options: SlurmOptions, paths: list[str], tasks: int, cost: DocumentCost = BUNDLED
) -> tuple[Partition, str]:
    """Every check of the module docstring; the partition the arrays go to and the submission's cost line
    (``cost.CurationCost``)."""
    partition, limit = check_array_resources(options)
    estimate = largest_task_bytes(paths, tasks) / 1e6 * cost.seconds_per_mb / options.cpus_per_task
    if limit < estimate:
        raise SlurmError(
            f"--slurm-time {options.time} is shorter than one curate task's estimate {format_time(estimate)} "
            f"({cost.seconds_per_mb:.2g} s per MB of WARC); raise --slurm-time or use more --tasks"
        )
    planned: CurationCost = curation_cost(paths, tasks, options.cpus_per_task, limit, cost)
    return partition, planned.line(estimate)
