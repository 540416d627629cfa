"""The bundled sample through ``pipelines.run`` with the distributed dedup clustering (``--cluster-tasks 2``, below
its size threshold), stopped after its first large-star pass, then one of that pass's committed edge files cut
short after its task's receipt (a disk fault): the state the resume tests start from on each executor
(``tests/pipelines/test_star_run.py``, ``test_ray.py``, ``test_slurm_stages.py``). A run stops at a fixed point:
a folder where a task of the next stage opens its file, so that the open fails whatever the machine's load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dedup.records import TMP_SUFFIX
from dedup.star import ClusterSizes, pass_dir, receipt_path
from tests.support.cli import run_cli

STAR = ("--cluster-tasks", "2", "--cluster-memory-mb", "122")  # the passes, whatever the (small) pair count
CLUSTERS = "minhash/clusters"
FIRST_PASS = "dedup_clusters_pass_001"  # the executor's stage: its logs, stats and completion markers
# the first large-star's task 1: its edges for the next pass's task 0 (cut short), and every file it wrote
CUT = f"{CLUSTERS}/{pass_dir(1)}/00000/00001.edges"
TASK_FILES = frozenset(
    {
        *(f"{CLUSTERS}/{pass_dir(1)}/{dst:05d}/00001.edges" for dst in range(2)),
        f"{CLUSTERS}/{receipt_path(pass_dir(1), 1)}",
    }
)
INPUTS = f"{CLUSTERS}/{pass_dir(0)}/00001"  # what that task reads: the route stage's edges for it
CUT_BYTES = 8  # the end marker
# where task 0 of a stage opens its first routed file (edges for task 0)
SECOND_PASS_OPEN = f"{CLUSTERS}/{pass_dir(2)}/00000/00000.edges{TMP_SUFFIX}"
SIZES_OPEN = f"{CLUSTERS}/{ClusterSizes.directory}/00000/00000.edges{TMP_SUFFIX}"


def sample_command(out: Path, *extra: str) -> list[str]:
    """``pipelines.run sample`` with the distributed clustering into ``out``, one task at a time (a failing task
    stops the run at once: the next one never starts)."""
    return ["pipelines.run", "sample", "--out", str(out), "--workers", "1", *STAR, *extra]


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


def stopped_after_the_first_pass(run: Path, out: Path) -> Path:
    """``curated_copy`` of ``run``, then ``sample_command`` stopped when the second pass's task 0 opens its first
    file: the route stage and the first large-star finished (receipts, completion markers), nothing of the second
    pass; then the first pass's task 1's edge file for task 0 loses its end marker. The run directory."""
    run_dir = curated_copy(run, out)
    block = blocked(run_dir, SECOND_PASS_OPEN)
    proc = run_cli(*sample_command(out), check=False)
    assert proc.returncode == 1 and f"IsADirectoryError: [Errno 21] Is a directory: '{block}'" in proc.stderr, (
        proc.stderr[-3000:]
    )
    block.rmdir()
    assert sorted(os.listdir(run_dir / "completions" / FIRST_PASS)) == ["00000", "00001"]
    assert not (run_dir / "completions" / "dedup_clusters_pass_002").exists()
    os.truncate(run_dir / CUT, (run_dir / CUT).stat().st_size - CUT_BYTES)
    return run_dir


def identities(run_dir: Path, folder: str) -> dict[str, tuple[int, int]]:
    """Every file under ``run_dir / folder``: its inode and modification time, by its path in the run directory."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in (run_dir / folder).rglob("*")
        if p.is_file()
    }


def cut_short_error(run_dir: Path) -> str:
    """The start of the one-line error of a resumed run whose cut task cannot run again (its inputs gone)."""
    size = (run_dir / CUT).stat().st_size
    return (
        f"error: {run_dir / CUT}: {size} bytes, its receipt says {size + CUT_BYTES}; {FIRST_PASS} task 1 cannot run "
        f"again: {run_dir / INPUTS}/00000.edges: missing"
    )


@pytest.fixture(scope="session")
def distributed_sample(local_sample_without_dedup: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sample_command`` run uninterrupted on the local executor, resuming the session's sample curation
    (``local_sample_without_dedup``): the reference of the resumed runs. Its run directory."""
    out = tmp_path_factory.mktemp("distributed-sample")
    run_dir = curated_copy(local_sample_without_dedup, out)
    run_cli(*sample_command(out))
    assert not (run_dir / CLUSTERS / "work").exists()
    return run_dir
