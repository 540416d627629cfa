"""``python -m trainer.slurm`` on a real single-node Slurm cluster (``tests/support/slurm_cluster.py``): two
torchrun agents started by ``srun`` meet by c10d rendezvous (as two nodes would); in mid-run the job gets the
``USR1`` that Slurm sends before a time limit: the ranks checkpoint the step they are at and stop, the job
requeues itself, resumes from that checkpoint and logs the losses of ``torchrun --nproc_per_node=2`` on the
same data.
Bad input: one line, exit 2, no script written, nothing submitted."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.slurm import job_state, wait_for_job
from tests.support.cli import run_cli
from tests.support.slurm_cluster import SlurmCluster, cluster_or_skip
from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.slurm import main as slurm_main

STEPS = 60


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from cluster_or_skip()


def _losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_and_release(slurm: SlurmCluster, job: str) -> None:
    """``USR1`` to the batch script (what ``--signal=B:USR1@120`` sends before the time limit), then lift the
    hold Slurm puts on a requeued job (its begin time, 120 s on) so the test does not wait for it, but only
    once the old start is gone: the node idle and 2 s past the requeue. Lifted at once, the new start was
    launched within the second of the requeue, slurmd took its credential for the old start's revoked one
    (slurmctld.log: "Killing non-startable batch JobId=1: Job credential revoked") and the job ended FAILED
    with no second start (2 times in 4 runs beside 3 busy processes). Slurm's own hold is what keeps that
    from happening on a real cluster."""
    assert slurm.run("scancel", "--signal=USR1", "--batch", job).returncode == 0
    deadline = time.monotonic() + 120
    pending_since = None
    while time.monotonic() < deadline:  # RUNNING (checkpointing), then requeued: PENDING until its begin time
        state = job_state(job)
        if state == "PENDING":
            pending_since = pending_since or time.monotonic()
            if time.monotonic() - pending_since >= 2 and _node_idle(slurm):
                assert slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now").returncode == 0
                return
        assert state in ("RUNNING", "COMPLETING", "REQUEUED", "PENDING"), f"job {job}: {state} instead of a requeue"
        time.sleep(0.2)
    raise AssertionError(f"job {job} was not requeued")


def _node_idle(slurm: SlurmCluster) -> bool:
    """No step of any start left on the node (``sinfo`` says idle, not mixed, allocated or completing)."""
    states = slurm.run("sinfo", "-h", "-N", "-o", "%t").stdout.split()
    return bool(states) and set(states) == {"idle"}


@pytest.mark.e2e
def test_a_requeued_sbatch_run_has_the_losses_of_torchrun(slurm: SlurmCluster, tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=600, seq_len=32)
    flags = ["--shards", str(shards), "--tokenizer", str(tok), "--micro-batch", "2", "--log-every", "1",
             "--checkpoint-every", "5", "--max-steps", str(STEPS), "--no-export-hf"]  # fmt: skip
    torchrun(["trainer/fsdp_train.py", *flags, "--out", str(tmp_path / "torchrun")])
    out = tmp_path / "slurm"
    proc = run_cli("trainer.slurm", "--agents-per-node", "2", "--rdzv-port", str(_free_port()), "--", *flags,
                   "--out", str(out))  # fmt: skip
    job = proc.stdout.split("submitted job ")[1].split(":")[0]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not (out / "metrics.jsonl").exists() or max(_losses(out), default=0) < 7):
        time.sleep(0.05)
    interrupted_at = max(_losses(out))
    assert interrupted_at < STEPS, "the run ended before it could be requeued"
    _signal_and_release(slurm, job)
    assert wait_for_job(job, poll_s=0.5) == "COMPLETED"
    log = (out / "slurm" / f"train-{job}.out").read_text()
    assert f"[slurm] job {job} start 1" in log, log[-3000:]
    stopped = re.search(r"step (\d+): \S+ appeared: checkpoint, then stop", log)
    resumed = re.search(r"resumed from \S+ at step (\d+)", log)
    assert stopped and resumed and stopped.group(1) == resumed.group(1), log[-3000:]  # no step lost on the signal
    reference = _losses(tmp_path / "torchrun")
    print(f"signalled after step {interrupted_at}, stopped at {stopped.group(1)}; {len(reference)} losses compared")
    assert len(reference) == STEPS and _losses(out) == reference


def test_the_dry_run_prints_nodes_times_the_time_limit(tmp_path: Path, capsys) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    flags = ["--nodes", "4", "--gpus-per-node", "8", "--cpus-per-task", "16", "--time", "12:00:00", "--dry-run"]
    out = str(tmp_path / "train")  # apart from the shards (an output folder holding its inputs is refused)
    assert slurm_main([*flags, "--", "--shards", str(shards), "--tokenizer", str(tok), "--out", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == (
        "[slurm] cost: 4 node(s) x --time 12:00:00 = at most 48 node-hours, 768 CPU-hours, 384 GPU-hours "
        "per start of the job (each requeue may hold as much again)"
    )


def test_without_slurm_nothing_is_written(tmp_path: Path, monkeypatch, capsys) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "train"
    assert slurm_main(["--", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no Slurm on this machine: sbatch"), err
    assert not out.exists()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--partition", "gpu-h100"], "unknown partition 'gpu-h100'; available: debug, short"),
        (["--partition", "short", "--time", "1:00:00"], "--time 1:00:00 exceeds partition short's limit 0:05:00"),
        (["--time", "soon"], "--time 'soon': not a Slurm time limit"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_submitted(slurm: SlurmCluster, tmp_path, capsys, flags, message) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    out = tmp_path / "train"
    queue_before = slurm.queue()
    assert slurm_main([*flags, "--", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not out.exists() and slurm.queue() == queue_before
