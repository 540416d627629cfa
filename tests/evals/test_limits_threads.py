"""`--limit` / `--eval-limit` take items spread over the whole task, not its head; CPU threads fit the machine."""

from __future__ import annotations

import pytest

from evals.models import cpu_threads
from evals.tasks.base import shard_items


def test_a_limit_spreads_over_the_task_and_ranks_share_it_without_overlap() -> None:
    assert shard_items(100, limit=4) == [0, 25, 50, 75]  # before: [0, 1, 2, 3], one BLiMP paradigm
    shares = [shard_items(100, rank, 3, limit=10) for rank in range(3)]
    assert sorted(i for share in shares for i in share) == list(range(0, 100, 10))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert shard_items(5, limit=50) == [0, 1, 2, 3, 4] and shard_items(5) == [0, 1, 2, 3, 4]


def test_cpu_threads_are_shared_among_local_ranks_and_omp_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setattr("os.getloadavg", lambda: (4.2, 0.0, 0.0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cpu_threads() == (6, "16 CPUs, load 4.2, 2 local rank(s)")  # 12 idle CPUs between 2 ranks
    monkeypatch.setattr("os.getloadavg", lambda: (40.0, 0.0, 0.0))
    assert cpu_threads()[0] == 1  # an overloaded machine: one thread, never zero
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads()[1] == "OMP_NUM_THREADS"
