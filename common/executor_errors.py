"""Errors the CLI prints as one line (exit 2), defined below every executor so none imports another."""

from typing import Any


class ExecutorError(RuntimeError):
    """A stage cannot run or did not finish on its executor: the CLI prints it as one line."""


def raise_if_incomplete(executor: Any, stage: str, error: type[Exception], tasks: str, hint: str) -> None:
    """After a stage: ``error`` naming how many of its ``tasks`` ("Ray tasks", "Slurm tasks") did not complete,
    the first ranks and ``hint`` (where the logs are, how to resume), when any did not."""
    missing = executor.get_incomplete_ranks(range(executor.world_size), skip_completed=True)
    if missing:
        done_not = f"{len(missing)}/{executor.world_size} {tasks} did not complete (first: {missing[:5]})"
        raise error(f"{stage}: {done_not}; {hint}")
