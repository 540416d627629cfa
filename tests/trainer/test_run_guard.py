"""A training run owns its `--out`: a second run is refused while the first writes it, killing the torchrun
launcher takes the ranks with it, and a resumed run's metrics.jsonl holds each step once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import REPO
from tests.support.processes import descendants, kill_all, wait_gone
from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs
from trainer.metrics import keep_records_up_to

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _launch(module: str, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", module, "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py", *flags]


def _logged_steps(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    return sum(1 for line in metrics.read_text().splitlines() if '"loss"' in line)


@pytest.mark.e2e
def test_locked_out_launcher_kill_and_resumed_metrics(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=600, seq_len=32)
    out = tmp_path / "train"
    flags = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(out), "--micro-batch", "2",
             "--log-every", "1", "--checkpoint-every", "3", "--no-export-hf"]  # fmt: skip
    first = subprocess.Popen(_launch("torch.distributed.run", flags), cwd=REPO, env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ranks: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while first.poll() is None and _logged_steps(out / "metrics.jsonl") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before the second started"
        second = subprocess.run(_launch("trainer.launch", flags), cwd=REPO, env=ENV, capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.count("\n") == 1 and second.stderr.startswith("error: "), second.stderr
        assert "being written by another training run (pid" in second.stderr, second.stderr
        while first.poll() is None and _logged_steps(out / "metrics.jsonl") < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before it could be killed"
        ranks = descendants(first.pid)
        assert len(ranks) >= 2
        first.send_signal(signal.SIGKILL)  # the launcher only: its ranks run in their own sessions
        first.wait(timeout=30)
        assert wait_gone(ranks) == set(), "ranks outlived their launcher"
    finally:
        kill_all(ranks)
        if first.poll() is None:
            first.kill()
    killed_at = max(r["step"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r)
    resumed = subprocess.run(_launch("torch.distributed.run", [*flags, "--resume", "--max-steps", str(killed_at + 3)]),
                             cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r]
    print(f"killed after step {killed_at}; after the resume {len(steps)} step records, {len(set(steps))} distinct")
    assert steps == list(range(1, killed_at + 4))


def test_records_past_the_resumed_step_are_dropped(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    records = [{"step": s, "loss": 1.0} for s in range(1, 6)] + [{"step": 3, "val_loss": 2.0}, {"note": "x"}]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 6, "lo')  # cut by a kill
    assert keep_records_up_to(metrics, 3) == 3
    assert read_jsonl(metrics) == [*records[:3], records[5], records[6]]
    assert keep_records_up_to(metrics, 3) == 0


def test_in_process_runs_release_the_lock_when_they_end(tmp_path: Path) -> None:
    """Two phases on one `--out` in one process (what evals.ablate and notebooks do): the first releases it."""
    from common.lock import FolderLock
    from trainer.fsdp_train import TrainConfig, train

    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    cfg = TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / "train", micro_batch=4, max_steps=1,
                      export_hf=False, checkpoint_every=1)  # fmt: skip
    train(cfg)
    train(TrainConfig(**{**vars(cfg), "resume": True, "max_steps": 2}))
    with FolderLock(tmp_path / "train", "check"):  # free again once the second run returned
        pass
