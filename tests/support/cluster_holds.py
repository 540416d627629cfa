"""Kill points of the distributed clustering's tests (tests/dedup/test_star*.py, two tasks per pass): where a task
is held after it wrote part of its output (``fifo_holds.hold_open`` on the next file it opens), and what a reader
must see it left there. What resumes from that state must give the union-find's clusters."""

from __future__ import annotations

from pathlib import Path

import pytest
from datatrove.io import get_datafolder

from dedup.clusters import SUMMARY
from dedup.extsort import KEYED
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.records import CorruptFileError, open_records
from dedup.star import EDGE_KIND, ClusterWrite, pass_dir, read_receipts

TASKS = 2
PASS_HOLD = f"{pass_dir(1)}/00001.json.tmp"  # the first large-star's rank 1: its edges written, its receipt not
WRITE_HOLD = f"{clusters_path(1)}.tmp"  # the write stage's task 0: rank 0's cluster file written, rank 1's not


def killed_mid_pass(clusters: Path, logs: Path, fp: int) -> None:
    """Both edge files of the held task are whole under their final names, its receipt is missing, so the pass is
    complete neither for the stages (its receipts) nor for the executor (the completion marker under ``logs``)."""
    folder = get_datafolder(str(clusters))
    for dst in range(TASKS):
        path = f"{pass_dir(1)}/{dst:05d}/00001.edges"
        open_records(folder, path, EDGE_KIND, fp, KEYED, rank=1, world_size=TASKS)
    assert not folder.exists(f"{pass_dir(1)}/00001.json")  # the held task's receipt (on Ray, task 0 may still run)
    with pytest.raises(CorruptFileError, match=r"0000\d\.json: missing"):
        read_receipts(folder, pass_dir(1), TASKS)
    assert not (logs / "dedup_clusters_pass_001" / "completions" / "00001").exists()
    assert not (clusters / pass_dir(2)).exists()


def killed_mid_write(clusters: Path, logs: Path, fp: int, world: int) -> None:
    """Rank 0's cluster file is whole, rank 1's is not there under its name, and the write task has no receipt
    nor completion marker and the clusters no summary: a reader finds the clusters incomplete."""
    folder = get_datafolder(str(clusters))
    assert open_records(folder, clusters_path(0), CLUSTER_KIND, fp, CLUSTER, 0, world).n_records > 0
    with pytest.raises(CorruptFileError, match="missing"):
        open_records(folder, clusters_path(1), CLUSTER_KIND, fp, CLUSTER, 1, world)
    assert not (clusters / ClusterWrite.directory / "00000.json").exists() and not (clusters / SUMMARY).exists()
    assert not (logs / "dedup_clusters_write" / "completions" / "00000").exists()
