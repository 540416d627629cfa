"""The bundled sample through ``pipelines.run`` with the distributed dedup clustering (``--cluster-tasks 2``, below
its size threshold), stopped after one of its stages, then one of that stage's committed files cut short after its
task's receipt (a disk fault): the state the resume tests start from on each executor
(``tests/pipelines/test_star_run.py``, ``test_ray.py``, ``test_slurm.py``). A run stops at a fixed point:
a folder where task 0 of the next stage opens its first file, so that the open fails whatever the machine's load
(one task at a time: the next task never starts)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dedup.formats import clusters_path
from dedup.records import TMP_SUFFIX
from dedup.star import ClusterNumbers, ClusterSizes, receipt_path
from tests.support.cli import run_cli
from tests.support.run_compare import assert_same_run

STAR = ("--cluster-tasks", "2", "--cluster-memory-mb", "122")  # the passes, whatever the (small) pair count
CLUSTERS = "minhash/clusters"
WORK = f"{CLUSTERS}/work"  # the stages' routed files and receipts, removed once the clusters are written
CUT_BYTES = 8  # the end marker


@dataclass(frozen=True)
class Cut:
    """Task ``task`` of the executor's stage ``stage`` (its files under ``directory``, named ``*.ext``) had
    finished when the run stopped at ``stop`` (task 0 of the next stage opening its first file); then its file for
    the next stage's task 0 is cut short. ``inputs``: the folder it reads."""

    stage: str
    directory: str
    ext: str
    task: int
    inputs: str
    stop: str

    @property
    def file(self) -> str:
        return f"{CLUSTERS}/{self.directory}/00000/{self.task:05d}.{self.ext}"

    @property
    def files(self) -> frozenset[str]:
        """Every file the task wrote, its receipt too."""
        routed = (f"{CLUSTERS}/{self.directory}/{dst:05d}/{self.task:05d}.{self.ext}" for dst in range(2))
        return frozenset({*routed, f"{CLUSTERS}/{receipt_path(self.directory, self.task)}"})

    @property
    def stats(self) -> frozenset[str]:
        """The stats files the task's run writes: its own, its stage's."""
        return frozenset({f"stats/{self.stage}/{self.task:05d}.json", f"stats/{self.stage}.json"})


# the number stage's task 0 (the labels of every clustered document: the sample is one rank, written by task 0),
# stopped in the write stage (fewer stages left to run, on Ray or Slurm, than after a pass)
LABELS = Cut(
    "dedup_clusters_number", ClusterNumbers.directory, "labels", 0, f"{CLUSTERS}/{ClusterSizes.directory}/00000",
    f"{CLUSTERS}/{clusters_path(0)}{TMP_SUFFIX}",
)  # fmt: skip


def sample_command(out: Path, *extra: str, workers: int = 1) -> list[str]:
    """``pipelines.run sample`` with the distributed clustering into ``out``, ``workers`` tasks at a time."""
    return ["pipelines.run", "sample", "--out", str(out), "--workers", str(workers), *STAR, *extra]


def curated_copy(run: Path, out: Path) -> Path:
    """A run directory ``out/sample`` whose curation is ``run``'s (its documents, removed documents, completion
    marker, stats and ``run.json``): the same command resumes it at the dedup stages. Its path."""
    dst = out / "sample"
    for part in ("curated", "completions/curate", "stats/curate", "logs/curate"):
        shutil.copytree(run / part, dst / part)
    for step in (run / "removed").iterdir():
        if step.name != "minhash":
            shutil.copytree(step, dst / "removed" / step.name)
    for name in ("run.json", "inputs.txt"):
        shutil.copy2(run / name, dst / name)
    return dst


def blocked(run_dir: Path, path: str) -> Path:
    """A folder at ``path`` (under ``run_dir``), where a task opens a file: the open fails, and the run stops."""
    (run_dir / path).mkdir(parents=True)
    return run_dir / path


def stopped_and_cut(run: Path, out: Path, cut: Cut) -> Path:
    """``curated_copy`` of ``run``, then ``sample_command`` (the local executor) stopped at ``cut.stop``: the
    stage of ``cut`` finished (receipts, completion markers), nothing of the next; then the file of ``cut`` loses
    its end marker. The run directory."""
    run_dir = curated_copy(run, out)
    block = blocked(run_dir, cut.stop)
    proc = run_cli(*sample_command(out), check=False)
    assert proc.returncode == 1 and f"IsADirectoryError: [Errno 21] Is a directory: '{block}'" in proc.stderr, (
        proc.stderr[-3000:]
    )
    block.rmdir()
    assert sorted(os.listdir(run_dir / "completions" / cut.stage)) == ["00000", "00001"]
    os.truncate(run_dir / cut.file, (run_dir / cut.file).stat().st_size - CUT_BYTES)
    return run_dir


def identities(run_dir: Path, folder: str) -> dict[str, tuple[int, int]]:
    """Every file under ``run_dir / folder``: its inode and modification time, by its path in the run directory."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in (run_dir / folder).rglob("*")
        if p.is_file()
    }


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> set[str]:
    """The files of ``before`` (``identities``) written again or gone in ``after``."""
    return {name for name, ids in before.items() if after.get(name) != ids}


def stops_on_the_cut(run_dir: Path, out: Path, cut: Cut, *extra: str) -> None:
    """With the cut task's inputs moved away, ``sample_command(out, *extra)`` stops before the next stage: one
    ``error:`` line naming the cut file and the missing input, exit 2, and no task ran (no file of the work folder
    nor any stats file written). The inputs are put back."""
    work, stats = identities(run_dir, WORK), identities(run_dir, "stats")
    shutil.move(run_dir / cut.inputs, out / "aside")
    proc = run_cli(*sample_command(out, *extra), check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    size = (run_dir / cut.file).stat().st_size
    error = (
        f"error: {run_dir / cut.file}: {size} bytes, its receipt says {size + CUT_BYTES}; {cut.stage} task "
        f"{cut.task} cannot run again: {run_dir / cut.inputs}/00000.edges: missing"
    )
    assert proc.stderr.strip().splitlines()[-1].startswith(error), proc.stderr[-3000:]
    assert identities(run_dir, WORK) == {
        name: ids for name, ids in work.items() if not name.startswith(f"{cut.inputs}/")
    }
    assert identities(run_dir, "stats") == stats
    shutil.move(out / "aside", run_dir / cut.inputs)


def redone_on(stopped: Path, out: Path, reference: Path, cut: Cut, *executor: str) -> subprocess.CompletedProcess:
    """A copy of ``stopped`` (``stopped_and_cut`` with ``cut``) in ``out``, ``stops_on_the_cut`` and the run resumed
    on ``executor`` (its options): the cut task runs again there, the only task of the finished stages that does
    (their stats files), and the finished run's documents, removed documents and stats are ``reference``'s (the
    uninterrupted run). The resumed run's output."""
    run_dir = out / "sample"
    shutil.copytree(stopped, run_dir)
    stats = identities(run_dir, "stats")
    stops_on_the_cut(run_dir, out, cut, *executor)
    proc = run_cli(*sample_command(out, *executor, workers=2))  # the write stage's two tasks side by side
    assert f": {cut.stage} task {cut.task} runs again" in proc.stderr, proc.stderr[-3000:]
    rewritten = changed(stats, identities(run_dir, "stats"))
    # the task's stats file, and its stage's merged stats where the executor writes them (not Slurm's arrays)
    assert {f"stats/{cut.stage}/{cut.task:05d}.json"} <= rewritten <= cut.stats, rewritten
    assert not (run_dir / WORK).exists()
    assert_same_run(str(run_dir), reference)
    return proc


def uninterrupted(run: Path, out: Path) -> Path:
    """``sample_command`` run uninterrupted on the local executor into ``out``, resuming ``run``'s curation (the
    reference of the resumed runs): its run directory."""
    run_dir = curated_copy(run, out)
    run_cli(*sample_command(out))
    assert not (run_dir / WORK).exists()
    return run_dir
