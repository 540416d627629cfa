"""Shared fixtures: one run of the bundled sample, reused by the CLI, refilter and output tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m <args>`` from the repo root, with output captured."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> Path:
    """``python -m pipelines.run sample --train`` (the quickstart's job) once per session: the run dir."""
    out = tmp_path_factory.mktemp("sample-run")
    proc = run_cli("pipelines.run", "sample", "--out", str(out), "--workers", "2", "--train")
    run_dir = out / "sample"
    (run_dir / "cli-stdout.txt").write_text(proc.stdout)
    return run_dir
