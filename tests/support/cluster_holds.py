"""Kill points of the distributed clustering's tests (tests/dedup/test_star*.py, two tasks per pass): where a task
is held after it wrote part of its output (``fifo_holds.hold_open`` on the next file it opens), and what a reader
must see it left there. What resumes from that state must give the union-find's clusters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from datatrove.io import get_datafolder

from dedup.clusters import CLUSTER_TABLE, SUMMARY
from dedup.extsort import KEYED
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.records import HEADER, TMP_SUFFIX, CorruptFileError, open_records
from dedup.star import EDGE_KIND, LABEL_KIND, ClusterNumbers, ClusterWrite, pass_dir, read_receipts, receipt_path

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


@dataclass(frozen=True)
class MidFile:
    """A task held mid-file (``fifo_holds.hold_write`` on its routed file for ``held_dst``): its file for
    ``half_dst`` has its header and part of its records, under its ``.tmp`` name, when the run is killed."""

    what: str
    stage: str  # the executor's stage (its logs and completion markers)
    directory: str  # the stage's folder under the clusters
    src: int  # the held task
    held_dst: int
    half_dst: int

    @property
    def kind(self) -> tuple[str, bytes, np.dtype]:
        return ("edges", EDGE_KIND, KEYED) if self.what == "edges" else ("labels", LABEL_KIND, CLUSTER_TABLE)

    def path(self, dst: int, src: int | None = None) -> str:
        return f"{self.directory}/{dst:05d}/{self.src if src is None else src:05d}.{self.kind[0]}"

    @property
    def hold(self) -> str:
        return self.path(self.held_dst) + TMP_SUFFIX

    @property
    def half(self) -> str:
        return self.path(self.half_dst) + TMP_SUFFIX


MID_FILE = (
    MidFile("edges", "dedup_clusters_pass_001", pass_dir(1), src=1, held_dst=1, half_dst=0),
    # number task 0: its roots are in ranks 0-2, their members anywhere (task 1's all go to destination 1)
    MidFile("labels", "dedup_clusters_number", ClusterNumbers.directory, src=0, held_dst=1, half_dst=0),
)


def final_files(clusters: Path, held: MidFile) -> dict[str, tuple[int, int]]:
    """Every committed file and receipt of the held stage (not the sort runs a killed task left): its inode and
    modification time."""
    stage = clusters / held.directory
    return {
        str(p.relative_to(clusters)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in stage.rglob("*")
        if p.is_file() and not p.name.endswith((TMP_SUFFIX, ".regular")) and not p.parent.name.endswith(".runs")
    }


def killed_mid_file(clusters: Path, logs: Path, fp: int, held: MidFile) -> dict[str, tuple[int, int]]:
    """The half-written file is there under its ``.tmp`` name with records in it and no footer; no file of the held
    task is under its final name, and it has no receipt nor completion marker. Returns ``final_files``."""
    _, kind, dtype = held.kind
    half = clusters / held.half
    assert half.stat().st_size > HEADER.size + dtype.itemsize  # records, not just the header
    with pytest.raises(CorruptFileError, match="unfinished|truncated"):
        open_records(get_datafolder(str(clusters)), held.half, kind, fp, dtype, rank=held.src, world_size=TASKS)
    assert not any((clusters / held.path(dst)).exists() for dst in range(TASKS))
    assert not (clusters / receipt_path(held.directory, held.src)).exists()
    assert not (logs / held.stage / "completions" / f"{held.src:05d}").exists()
    return final_files(clusters, held)


def redone(clusters: Path, fp: int, held: MidFile, before: dict[str, tuple[int, int]]) -> None:
    """After the held stage ran again: the files that were committed are untouched (only the held task ran), the
    held task's files are whole and its receipt counts their records once, and no ``.tmp`` nor sort run is left."""
    after = final_files(clusters, held)
    assert {name: after[name] for name in before} == before
    folder, (_, kind, dtype) = get_datafolder(str(clusters)), held.kind
    files = [open_records(folder, held.path(d), kind, fp, dtype, rank=held.src, world_size=TASKS) for d in range(TASKS)]
    receipt = json.loads((clusters / receipt_path(held.directory, held.src)).read_text())
    assert receipt["records"] == sum(len(f.read_all()) for f in files) > 0
    assert not [p for p in (clusters / held.directory).rglob("*") if p.name.endswith((TMP_SUFFIX, ".runs", ".run"))]
