"""``--executor slurm`` on a real single-node Slurm cluster (``tests/support/slurm_cluster.py``): the same
documents and stats as the local executor, a cancelled array task resubmitted by the rerun (nothing lost
or duplicated), ``--detach``, and bad input refused before anything is submitted."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.slurm import SlurmError, parse_time
from pipelines.run import main as run_main
from tests.support.cli import REPO, run_cli
from tests.support.mirror import write_mirror
from tests.support.run_compare import assert_same_run
from tests.support.slurm_cluster import SlurmCluster, cluster_or_skip
from tests.support.star_runs import LABELS

CRAWL = "CC-MAIN-2024-18"


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from cluster_or_skip()


def _wait_job(cluster: SlurmCluster, job: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "-j", job).stdout.strip():
            return
        time.sleep(1)
    raise AssertionError(f"job {job} still queued after {timeout} s")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("1:30", 90), ("01:02:03", 3723), ("2-0", 172800), ("1-02:03", 93780), ("1-0:0:5", 86405)],
)
def test_slurm_time_limits_parse_as_sbatch_reads_them(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "1h", "1:2:3:4", "-5"])
def test_a_malformed_time_limit_is_refused(text: str) -> None:
    with pytest.raises(SlurmError):
        parse_time(text)


def test_without_slurm_on_the_machine_nothing_is_written(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "out"
    assert run_main(["sample", "--executor", "slurm", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no Slurm on this machine: sbatch, squeue, sinfo, scancel, scontrol not found on PATH"]
    assert not out.exists()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--slurm-partition", "gpu-h100"], "unknown partition 'gpu-h100'; available: debug, short"),
        (["--slurm-partition", "short", "--slurm-time", "10"], "--slurm-time 10 exceeds partition short's limit"),
        (["--slurm-time", "0:01"], "--slurm-time 0:01 is shorter than one curate task's estimate 0:00:07"),
        (["--slurm-time", "2h"], "--slurm-time '2h': not a Slurm time limit"),
        (["--slurm-mem-per-cpu", "64"], "a task asks 64 GB (1 CPU x --slurm-mem-per-cpu 64)"),
        (["--slurm-cpus-per-task", "3"], "--slurm-cpus-per-task 3: partition debug's nodes have 2"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_submitted(slurm: SlurmCluster, tmp_path, capsys, flags, message) -> None:
    out = tmp_path / "out"
    jobs_before = slurm.run("squeue", "-h").stdout
    assert run_main(["sample", "--executor", "slurm", "--out", str(out), *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), lines
    assert not out.exists()
    assert slurm.run("squeue", "-h").stdout == jobs_before


@pytest.mark.e2e
def test_sample_detached_on_slurm_equals_local(
    slurm: SlurmCluster,
    local_sample_without_dedup: Path,
    tmp_path: Path,
) -> None:
    """``--detach`` submits the driver and returns; the driver's arrays give the local executor's run."""
    reference = local_sample_without_dedup
    args = ("pipelines.run", "sample", "--executor", "slurm", "--no-dedup", "--out", str(tmp_path / "slurm"))
    proc = run_cli(*args, "--detach", "--cost-from", str(reference))
    first, *_ = proc.stdout.splitlines()
    # the local run's own figures, printed before the submission: 1 WARC file, its documents, its step time
    local = json.loads((reference / "stats.json").read_text())["stages"]["curate"]["steps"]
    assert first.startswith("[slurm] cost: curate array of 1 task(s) x 1 CPU for 1 WARC file(s), 1.1 MB, ")
    assert f"~{local[1]['in']} documents x {sum(s['time_s'] for s in local) / local[1]['in'] * 1000:.1f} ms" in first
    assert f"(per-document cost of the finished run {reference})" in first
    assert "of its --slurm-time 4:00:00, at most 4 CPU-hours reserved" in first
    job = proc.stdout.split("as Slurm job ")[1].split()[0]
    assert "progress: tail -f" in proc.stdout
    _wait_job(slurm, job)
    run_dir = tmp_path / "slurm" / "sample"
    driver_log = (run_dir / "logs" / f"slurm-driver-{job}.out").read_text()
    assert "[slurm] curate: 1/1 tasks done" in driver_log, driver_log[-3000:]
    assert (run_dir / "logs/curate/launch_script.slurm").exists()
    assert_same_run(str(run_dir), reference, folders=("curated", "removed"))


def _at_a_terminal(args: list[str], answer: str) -> tuple[int, str]:
    """``python -m <args>`` with a terminal on stdin that answers ``answer``: exit status, stdout + stderr."""
    primary, secondary = pty.openpty()
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdin=secondary,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        os.write(primary, answer.encode() + b"\n")
        output, _ = proc.communicate(timeout=300)
    finally:
        os.close(primary)
        os.close(secondary)
    return proc.returncode, output


@pytest.mark.e2e
def test_at_a_terminal_the_cost_is_confirmed_before_anything_is_submitted(slurm: SlurmCluster, tmp_path) -> None:
    """``n`` to the question after the cost line: exit 1, no run directory, no job; ``y``: submitted."""
    queue_before = slurm.queue()
    args = ["pipelines.run", "sample", "--executor", "slurm", "--no-dedup", "--out", str(tmp_path / "out")]
    status, output = _at_a_terminal([*args, "--detach"], "n")
    assert status == 1 and "[slurm] cost: curate array of 1 task(s)" in output, output
    assert "(per-document cost of the FineWeb recipe on the bundled sample (bundled figure))" in output
    assert output.strip().endswith("submit? [y/N] not submitted: the cost was not confirmed (answer y, or pass --yes)")
    assert not (tmp_path / "out").exists() and slurm.queue() == queue_before
    status, output = _at_a_terminal([*args, "--detach"], "y")
    assert status == 0 and "as Slurm job " in output, output
    job = output.split("as Slurm job ")[1].split()[0]
    assert slurm.run("scancel", job).returncode == 0  # submitted: that was the point; the run is not
    _wait_job(slurm, job)


@pytest.mark.e2e
def test_a_cancelled_task_is_resubmitted_by_the_rerun(slurm: SlurmCluster, tmp_path) -> None:
    """No retries: task 0 is ``scancel``-ed while it runs, the driver fails with one line naming it, and the
    rerun submits that task alone."""
    write_mirror(tmp_path / "cc", CRAWL, 2)
    warcs = sorted(str(p) for p in (tmp_path / "cc").rglob("*.warc.gz"))
    run_cli("pipelines.run", *warcs, "--no-dedup", "--out", str(tmp_path / "local"))
    args = ["pipelines.run", *warcs, "--executor", "slurm", "--no-dedup", "--slurm-retries", "0"]
    args += ["--out", str(tmp_path / "slurm")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        cancelled = None
        deadline = time.monotonic() + 120
        while cancelled is None and time.monotonic() < deadline:
            running = [job for job, state in slurm.queue() if job.endswith("_0") and state == "RUNNING"]
            if running:
                cancelled = running[0]
                assert slurm.run("scancel", cancelled).returncode == 0
            time.sleep(0.2)
        assert cancelled, "task 0 never ran"
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGKILL)
    assert driver.returncode == 2, stdout[-2000:] + stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: curate: 1/2 Slurm tasks did not complete (first: [0])")
    run_dir = tmp_path / "slurm" / CRAWL
    assert not (run_dir / "completions/curate/00000").exists()

    run_cli(*args)
    assert json.loads((run_dir / "logs/curate/ranks_to_run.json").read_text()) == [0]  # only the cancelled one
    assert len(json.loads((run_dir / "logs/curate/slurm_jobs.json").read_text())) == 2
    assert_same_run(str(run_dir), tmp_path / "local" / CRAWL, folders=("curated", "removed"))


@pytest.mark.e2e
def test_a_star_file_cut_short_after_its_receipt_is_redone_on_slurm(
    slurm: SlurmCluster,
    resume_cut: Callable[..., subprocess.CompletedProcess],
    tmp_path: Path,
) -> None:
    """``pipelines.run sample --cluster-tasks 2`` stopped after its number stage, one of that stage's label files
    cut short after its task's receipt (``tests/support/star_runs.py``), resumed with ``--executor slurm``: with
    the task's inputs gone, one error line naming the file and no task run; with them back, an array of
    that task alone runs it again and the run equals the uninterrupted one."""
    queue = slurm.queue()
    resume_cut("--executor", "slurm")
    logs = tmp_path / "sample" / "logs" / LABELS.stage
    assert json.loads((logs / "ranks_to_run.json").read_text()) == [LABELS.task]
    assert len(json.loads((logs / "slurm_jobs.json").read_text())) == 1  # one array, one task: no other submitted
    assert slurm.queue() == queue
