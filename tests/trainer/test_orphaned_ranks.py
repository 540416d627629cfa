"""A training rank dies with its launcher at every moment of its life (issue 30), including while it starts.

The launcher (`python -m trainer.launch`, torchrun's agent in-process) is killed with SIGKILL as soon as
its ranks exist, while they are still importing torch. Before, a rank asked to die with its parent only
after that import, by which time its parent was init: the audit found 64 such ranks alive 21 minutes
later. Now a rank registers before any heavy import and then checks that its parent is still the
launcher whose pid it was given, so every rank is gone within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import REPO
from tests.support.processes import descendants, kill_all, wait_gone
from tests.support.trainer_inputs import synthetic_run_inputs


def _ranks(launcher: int) -> set[int]:
    found = set()
    for pid in descendants(launcher):
        try:
            if b"fsdp_train.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


@pytest.mark.e2e
def test_ranks_die_when_the_launcher_is_killed_while_they_start(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py",
           "--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "train")]  # fmt: skip
    launcher = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while launcher.poll() is None and time.monotonic() < deadline and len(ranks) < 2:
            ranks = _ranks(launcher.pid)
            time.sleep(0.01)
        assert len(ranks) == 2, "the ranks never started"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        assert wait_gone(ranks, timeout=60) == set()
    finally:
        kill_all(ranks)
        if launcher.poll() is None:
            launcher.kill()
