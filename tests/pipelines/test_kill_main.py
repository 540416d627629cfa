"""SIGKILL to the main `pipelines.run` process alone takes its whole tree with it (common/lifetime.py).

Before, datatrove's Manager server, the pool worker and the extraction sandbox child outlived it.
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
from tests.support.processes import descendants, generations, kill_all, wait_gone

SAMPLE = REPO / "pipelines" / "sample" / "sample.warc.gz"


@pytest.mark.e2e
def test_killing_the_main_process_leaves_no_descendant(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pipelines.run", str(SAMPLE), "--out", str(tmp_path), "--workers", "1", "--no-dedup"]
    main = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        # wait for the widest tree: datatrove's Manager server and the extraction sandbox (one worker: the
        # task runs in the main process, no pool)
        while main.poll() is None and time.monotonic() < deadline:
            if len(descendants(main.pid)) >= 2:
                break
            time.sleep(0.05)
        assert main.poll() is None, "the run ended before it could be killed"
        tree = descendants(main.pid)
        print(f"descendants when killed: {[len(g) for g in generations(main.pid)]} per generation")
        assert len(tree) >= 2
        main.send_signal(signal.SIGKILL)
        main.wait(timeout=30)
        assert wait_gone(tree) == set()
    finally:
        kill_all(tree)
        if main.poll() is None:
            main.kill()
