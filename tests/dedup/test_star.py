"""Distributed clustering (dedup/star.py) against the single-task union-find: the same cluster files."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.executor import LocalPipelineExecutor
from datatrove.io import get_datafolder
from datatrove.pipeline.base import PipelineStep

from dedup.buckets import DedupBuckets
from dedup.clusters import DedupClusters
from dedup.config import DedupConfig
from dedup.evaluation import near_duplicate, paragraph_chunks, planted_signatures, real_texts
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.keys import MinhashKeyer
from dedup.records import CorruptFileError, open_records
from dedup.run import run_dedup
from dedup.star import (
    ClusterNumbers,
    ClusterWrite,
    StarPass,
    buffer_records_for,
    cluster_stages,
    count_pairs,
    drop_completions,
    pass_dir,
    plan_clusters,
    receipt_path,
)
from tests.support.cluster_holds import (
    MID_FILE,
    PASS_HOLD,
    TASKS,
    WRITE_HOLD,
    killed_mid_file,
    killed_mid_pass,
    killed_mid_write,
    redone,
)
from tests.support.fifo_holds import (
    held_process,
    hold_open,
    hold_write,
    release_open,
    waits_in_fifo_open,
    waits_in_pipe_write,
)
from tests.support.processes import descendants, wait_gone
from tests.support.shared_data import shared_data_dir

ROOT = Path(__file__).resolve().parents[2]
SMALL_CAP = 122  # MB: a 26,214-record sort buffer, so every pass spills sorted runs to disk


def run_in_process(stages) -> dict[str, PipelineStep]:
    """Every stage's tasks in this process, one after another; each stage's step (its stats), in order."""
    ran = {}
    for name, steps, tasks in stages:
        ran[name] = steps[0]
        for rank in range(tasks):
            steps[0].run(rank=rank, world_size=tasks)
    return ran


def counters(step: PipelineStep) -> dict:
    """A step's counters (``stat_update``), as its stats file has them."""
    return step.stats.stats.to_dict()


def read_clusters(folder: Path, config: DedupConfig, ranks: int) -> list[np.ndarray]:
    fp, base = config.fingerprint("minhash"), get_datafolder(str(folder))
    return [open_records(base, clusters_path(r), CLUSTER_KIND, fp, CLUSTER, r, ranks).read_all() for r in range(ranks)]


def plant(base: Path, documents: int) -> tuple[Path, DedupConfig]:
    """Planted signatures of ``documents`` on 5 ranks, their pairs, and the single task's clusters, under ``base``;
    the single task's counters in ``base / "single_counters.json"``."""
    config = DedupConfig()
    planted_signatures(base / "sigs", documents, 5, config)
    for band in range(config.num_buckets):
        DedupBuckets(str(base / "sigs"), str(base / "pairs"), config).run(rank=band, world_size=config.num_buckets)
    single = DedupClusters(str(base / "pairs"), str(base / "sigs"), str(base / "single"), config)
    single.run()
    (base / "single_counters.json").write_text(json.dumps(counters(single)))
    return base, config


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """60k documents on 5 ranks, their pairs, and the single task's clusters."""
    return plant(tmp_path_factory.mktemp("planted"), 60_000)


@pytest.mark.parametrize("tasks", [2, 3, 7])
def test_same_clusters_as_union_find(planted, tmp_path, tasks):
    base, config = planted
    config = replace(config, cluster_tasks=tasks, cluster_memory_mb=SMALL_CAP)
    ran = run_in_process(
        cluster_stages("dedup", str(base / "pairs"), str(base / "sigs"), str(tmp_path), config, "minhash")
    )
    names = list(ran)
    assert names[0] == "dedup_clusters_route" and names[-1] == "dedup_clusters"
    assert any("pass_004" in n for n in names)  # chains and trees take more than one round
    single = read_clusters(base / "single", config, 5)
    ours = read_clusters(tmp_path, config, 5)
    assert sum(len(x) for x in single) == 30_000
    for a, b in zip(single, ours, strict=True):
        assert np.array_equal(a, b)
    expected = json.loads((base / "single" / "summary.json").read_text())
    assert json.loads((tmp_path / "summary.json").read_text()) == expected
    assert expected["largest_cluster"] == 300
    # the summary step's counters are the single task's: the duplicate pairs read, clusters, documents to remove
    single_counters = json.loads((base / "single_counters.json").read_text())
    assert counters(ran["dedup_clusters"]) == single_counters
    assert set(single_counters) == {"pairs", "clusters", "to_remove"}
    assert single_counters["pairs"]["total"] == count_pairs(str(base / "pairs"), config, "minhash") > 0
    assert not (tmp_path / "work").exists()


def test_resumes_pass_by_pass(planted, tmp_path, monkeypatch):
    """A run stopped after its third pass goes on from there: the finished passes are not run again."""
    base, config = planted
    config = replace(config, cluster_tasks=2, cluster_memory_mb=SMALL_CAP)
    args = ("dedup", str(base / "pairs"), str(base / "sigs"), str(tmp_path), config, "minhash")
    stages = cluster_stages(*args)
    for _ in range(4):  # route and three passes
        _, steps, tasks = next(stages)
        for rank in range(tasks):
            steps[0].run(rank=rank, world_size=tasks)
    redone: list[int] = []
    process = StarPass.process
    monkeypatch.setattr(StarPass, "process", lambda self, rank: redone.append(self.index) or process(self, rank))
    run_in_process(cluster_stages(*args))
    assert redone and min(redone) == 4
    assert not (tmp_path / "work").exists()
    single, ours = read_clusters(base / "single", config, 5), read_clusters(tmp_path, config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
    assert list(run_in_process(cluster_stages(*args))) == ["dedup_clusters"]  # complete: only the summary, skipped


def test_plan_and_bad_caps():
    small = plan_clusters(1_000_000, DedupConfig())
    assert small.mode == "single" and small.memory_mb_per_task < 4096
    big = plan_clusters(200_000_000, DedupConfig())
    assert big.mode == "distributed" and big.tasks == 25 and big.memory_mb_per_task <= 4096
    forced = plan_clusters(10, DedupConfig(cluster_tasks=4, cluster_memory_mb=500))
    assert forced.mode == "distributed" and forced.tasks == 4
    with pytest.raises(ValueError, match="below the"):
        buffer_records_for(50)
    with pytest.raises(ValueError, match="cluster_tasks"):
        DedupConfig(cluster_tasks=0)
    assert DedupConfig(cluster_tasks=3).fingerprint("minhash") == DedupConfig().fingerprint("minhash")


def test_impossible_cap_is_one_line(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["some words here"]}), tmp_path / "in" / "00000.parquet")
    cmd = [sys.executable, "-m", "dedup.run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out")]
    proc = subprocess.run([*cmd, "--cluster-memory-mb", "10"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "below the" in proc.stderr
    assert not (tmp_path / "out").exists()


def _neardup_parquet(folder: Path, keyer: MinhashKeyer) -> None:
    """Real texts of ``shared/data`` (the plagiarised answers, web pages, articles) in ~300-word documents,
    a third of them with near-duplicates at Jaccard 0.8-0.95 and chains of variants of variants."""
    data = shared_data_dir()
    if not data.exists():
        pytest.skip(f"shared data not found at {data}")
    docs = paragraph_chunks(real_texts(data), 300)
    rng = random.Random(33)
    vocabulary = rng.sample([w for d in docs for w in d.split()], 5000)
    rows = list(docs)
    for doc in docs[::3]:
        text = doc
        for _ in range(rng.choice([1, 1, 2, 4])):
            text, _ = near_duplicate(text.split(), rng.uniform(0.8, 0.95), keyer.shingles, rng, vocabulary)
            rows.append(text)
    rng.shuffle(rows)
    folder.mkdir()
    for i in range(3):
        part = rows[i::3]
        table = pa.table({"id": [f"{i}-{j}" for j in range(len(part))], "text": part})
        pq.write_table(table, folder / f"{i:05d}.parquet")


@pytest.mark.e2e
def test_held_out_near_duplicates_on_the_local_executor(tmp_path):
    """The real near-duplicate set (plagiarised answers) and real web pages through ``dedup.run``, with
    the local executor's process pool: the distributed stages remove exactly what the single task removes."""
    single_config = DedupConfig(word_split="whitespace")
    _neardup_parquet(tmp_path / "in", MinhashKeyer(single_config))
    single = run_dedup(str(tmp_path / "in"), str(tmp_path / "single"), single_config, workers=2)
    config = replace(single_config, cluster_tasks=3, cluster_memory_mb=SMALL_CAP)
    ours = run_dedup(str(tmp_path / "in"), str(tmp_path / "ours"), config, workers=2)
    assert single["minhash"] == ours["minhash"] and single["minhash"]["removed"] > 500
    assert any(name.startswith("dedup_clusters_pass") for name in ours["seconds"])
    for a, b in zip(read_clusters(tmp_path / "single" / "minhash" / "clusters", config, 3),
                    read_clusters(tmp_path / "ours" / "minhash" / "clusters", config, 3), strict=True):  # fmt: skip
        assert np.array_equal(a, b)
    removed = [
        sorted(pq.read_table(tmp_path / run / "removed" / "minhash").column("id").to_pylist())
        for run in ("single", "ours")
    ]
    assert removed[0] == removed[1]


def run_local_executor(
    args: tuple, logs: Path | str, workers: int = 2, after: Callable[[str], object] | None = None
) -> None:
    """Every cluster stage with datatrove's LocalPipelineExecutor (forked workers), as ``dedup.run`` runs them;
    ``after(stage)`` once each stage ran. One worker runs the tasks one after another in this process."""
    for name, steps, tasks in cluster_stages(*args):
        logging_dir = f"{logs}/{name}"  # a URL too
        LocalPipelineExecutor(steps, tasks=tasks, workers=workers, logging_dir=logging_dir, start_method="fork").run()
        if after is not None:
            after(name)


def kill_when_held(run: multiprocessing.Process, held: Callable[[Path], bool]) -> None:
    """SIGKILL the run and its workers once one of them is ``held`` (a fixed point: ``fifo_holds``)."""
    try:
        held_process(lambda: [run.pid, *descendants(run.pid)], run.is_alive, timeout=120, held=held)
    finally:
        tree = {run.pid, *descendants(run.pid)}
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.join()
        assert not wait_gone(tree)


def test_pass_executor_runs_each_pass(planted, tmp_path):
    """datatrove's LocalPipelineExecutor runs the passes (forked workers), as pipelines.run does."""
    base, config = planted
    config = replace(config, cluster_tasks=2, cluster_memory_mb=SMALL_CAP)
    run_local_executor(("dedup", str(base / "pairs"), str(base / "sigs"), str(tmp_path / "c"), config, "minhash"),
                       tmp_path / "logs")  # fmt: skip
    single, ours = read_clusters(base / "single", config, 5), read_clusters(tmp_path / "c", config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))


def test_killed_mid_write_resumes_on_the_local_executor(planted, tmp_path):
    """A local-executor run SIGKILLed (its process and workers) while a task is held after writing part of its
    output: the first large-star's rank 1 with its edge files written and no receipt, then (the rerun) the write
    stage's task 0 with rank 0's cluster file written and rank 1's not. Each rerun goes on from there; the last
    one's cluster files, ids and sizes are the union-find's and nothing partial is left beside them."""
    base, config = planted
    config = replace(config, cluster_tasks=TASKS, cluster_memory_mb=SMALL_CAP)
    out, logs, fp = tmp_path / "c", tmp_path / "logs", config.fingerprint("minhash")
    args = ("dedup", str(base / "pairs"), str(base / "sigs"), str(out), config, "minhash")
    holds = {PASS_HOLD: lambda: killed_mid_pass(out, logs, fp), WRITE_HOLD: lambda: killed_mid_write(out, logs, fp, 5)}
    for hold in holds:
        hold_open(out / hold)
    for hold, left in holds.items():
        run = multiprocessing.get_context("fork").Process(target=run_local_executor, args=(args, logs))
        run.start()
        kill_when_held(run, waits_in_fifo_open)
        left()
        release_open(out / hold)
    run_local_executor(args, logs)
    single, ours = read_clusters(base / "single", config, 5), read_clusters(out, config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
    assert json.loads((out / "summary.json").read_text()) == json.loads((base / "single" / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == [*(clusters_path(r) for r in range(5)), "summary.json"]


@pytest.mark.parametrize("held", MID_FILE, ids=lambda held: held.what)
def test_half_written_file_is_redone_on_the_local_executor(planted, tmp_path, held):
    """A local-executor run SIGKILLed while a task is mid-file: its writes to one of its routed files stall in a
    full pipe, so another of its files is left half-written under its ``.tmp`` name (the first large-star's edges,
    the number stage's labels). The rerun runs that task again and only it: its files whole, its receipt counting
    each record once, and the clusters are the union-find's."""
    base, config = planted
    config = replace(config, cluster_tasks=TASKS, cluster_memory_mb=SMALL_CAP)
    out, logs, fp = tmp_path / "c", tmp_path / "logs", config.fingerprint("minhash")
    args = ("dedup", str(base / "pairs"), str(base / "sigs"), str(out), config, "minhash")
    reader = hold_write(out / held.hold)
    try:
        run = multiprocessing.get_context("fork").Process(target=run_local_executor, args=(args, logs, 1))
        run.start()
        kill_when_held(run, partial(waits_in_pipe_write, out / held.hold))
    finally:
        os.close(reader)
    before = killed_mid_file(out, logs, fp, held)
    release_open(out / held.hold)
    run_local_executor(args, logs, after=lambda stage: stage == held.stage and redone(out, fp, held, before))
    single, ours = read_clusters(base / "single", config, 5), read_clusters(out, config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
    assert json.loads((out / "summary.json").read_text()) == json.loads((base / "single" / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == [*(clusters_path(r) for r in range(5)), "summary.json"]


class _Stopped(Exception):
    """Ends a run once a given stage ran (a fixed point: nothing is killed)."""


def stop_after(stage: str) -> Callable[[str], None]:
    def after(name: str) -> None:
        if name == stage:
            raise _Stopped(name)

    return after


@dataclass(frozen=True)
class CutShort:
    """A committed file of a finished stage, cut short after its task's receipt: the task that wrote it, its files
    (and receipt), and the folder of its inputs."""

    what: str
    stage: str
    cut: str
    task: int
    files: tuple[str, ...]
    inputs: str


EDGES_CUT = MID_FILE[0]  # the first large-star's task 1
CUT_SHORT = (
    # its edges for tasks 0 and 1 and its receipt, from the edges the route stage sent to it
    CutShort(
        "edges",
        EDGES_CUT.stage,
        EDGES_CUT.path(0),
        EDGES_CUT.src,
        (*(EDGES_CUT.path(dst) for dst in range(TASKS)), receipt_path(EDGES_CUT.directory, EDGES_CUT.src)),
        f"{pass_dir(0)}/{EDGES_CUT.src:05d}",
    ),
    # the write stage's task 0: the cluster files of ranks 0-2 and its receipt, from the labels sent to it
    CutShort(
        "clusters",
        "dedup_clusters_write",
        clusters_path(1),
        0,
        (*(clusters_path(r) for r in range(3)), receipt_path(ClusterWrite.directory, 0)),
        f"{ClusterNumbers.directory}/00000",
    ),
)


def identities(folder: Path, names: list[str]) -> dict[str, tuple[int, int]]:
    return {name: ((folder / name).stat().st_ino, (folder / name).stat().st_mtime_ns) for name in names}


@pytest.mark.parametrize("damage", CUT_SHORT, ids=lambda damage: damage.what)
def test_file_cut_short_after_its_receipt_is_redone_on_the_local_executor(planted, tmp_path, damage):
    """A stage runs to its end (receipts, completion markers), then one of its committed files is cut short (a disk
    fault after its task finished): a first large-star's edge file, a cluster file. While the inputs of the task
    that wrote it are gone, the resumed run's driver stops before the next stage with a one-line error naming that
    file and the missing input, and drops nothing. With them
    back, the resumed run drops that task's receipt and completion marker and runs it again, and only it: its files
    are written again, the other task's are untouched, and the clusters are the union-find's."""
    base, config = planted
    config = replace(config, cluster_tasks=TASKS, cluster_memory_mb=SMALL_CAP)
    out, logs = tmp_path / "c", tmp_path / "logs"
    rerun = drop_completions(lambda stage: f"{logs}/{stage}")
    args = ("dedup", str(base / "pairs"), str(base / "sigs"), str(out), config, "minhash", rerun)
    with pytest.raises(_Stopped):
        run_local_executor(args, logs, after=stop_after(damage.stage))
    cut, completion = out / damage.cut, logs / damage.stage / "completions" / f"{damage.task:05d}"
    os.truncate(cut, cut.stat().st_size - 100)  # its footer and some records
    written = [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]
    before = identities(out, written)
    others = [name for name in written if name not in damage.files]
    assert all(name in written for name in damage.files)
    (out / damage.inputs).rename(tmp_path / "aside")  # what the task would read again
    stop = rf"{re.escape(damage.cut)}: \d+ bytes, its receipt says \d+; {damage.stage} task {damage.task} cannot run"
    with pytest.raises(CorruptFileError, match=stop) as stopped:  # the driver, before the next stage
        run_local_executor(args, logs)
    assert "\n" not in str(stopped.value)
    assert identities(out, damage.files) == {name: before[name] for name in damage.files} and completion.exists()
    (tmp_path / "aside").rename(out / damage.inputs)
    checked: list[str] = []

    def check(stage: str) -> None:
        """Once the damaged task ran again, before the work folder is cleared: only its files are new."""
        if (
            stage == damage.stage
            and completion.exists()
            and identities(out, [damage.cut]) != {damage.cut: before[damage.cut]}
        ):
            assert identities(out, damage.files).items().isdisjoint(before.items())
            still = [name for name in others if (out / name).exists()]
            assert len(still) >= len(damage.files) and identities(out, still) == {n: before[n] for n in still}
            checked.append(stage)

    run_local_executor(args, logs, after=check)
    assert checked == [damage.stage]
    single, ours = read_clusters(base / "single", config, 5), read_clusters(out, config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
    assert json.loads((out / "summary.json").read_text()) == json.loads((base / "single" / "summary.json").read_text())
    assert not (out / "work").exists()


def test_a_cut_file_whose_reader_finished_is_left_when_its_task_cannot_run_again(planted, tmp_path):
    """The second pass's task 1 finished and its task 0 did not (its receipt and completion marker dropped); then
    the first pass's task 1's edge file for task 1 is cut short and that task's inputs are gone. The file's only
    reader has finished: the resumed run neither stops nor runs the task again, the second pass's task 0 (which
    reads other files) runs, and the clusters are the union-find's."""
    base, config = planted
    config = replace(config, cluster_tasks=TASKS, cluster_memory_mb=SMALL_CAP)
    out, logs = tmp_path / "c", tmp_path / "logs"
    rerun = drop_completions(lambda stage: f"{logs}/{stage}")
    args = ("dedup", str(base / "pairs"), str(base / "sigs"), str(out), config, "minhash", rerun)
    second = "dedup_clusters_pass_002"
    with pytest.raises(_Stopped):
        run_local_executor(args, logs, after=stop_after(second))
    (out / receipt_path(pass_dir(2), 0)).unlink()
    (logs / second / "completions" / "00000").unlink()
    cut = out / EDGES_CUT.path(1)
    os.truncate(cut, cut.stat().st_size - 100)
    (out / pass_dir(0) / f"{EDGES_CUT.src:05d}").rename(tmp_path / "aside")
    kept = [receipt_path(pass_dir(1), EDGES_CUT.src), receipt_path(pass_dir(2), 1)]
    before = identities(out, kept)
    checked: list[str] = []

    def check(stage: str) -> None:
        if stage == second and not checked:  # the second pass ran again: its task 0 alone
            assert identities(out, kept) == before and (out / receipt_path(pass_dir(2), 0)).exists()
            assert (logs / EDGES_CUT.stage / "completions" / f"{EDGES_CUT.src:05d}").exists()
            checked.append(stage)

    run_local_executor(args, logs, after=check)
    assert checked == [second]
    single, ours = read_clusters(base / "single", config, 5), read_clusters(out, config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
