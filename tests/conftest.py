"""Shared fixtures: one run of the bundled sample, reused by the CLI, refilter and output tests; the ``e2e`` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> Path:
    """``python -m pipelines.run sample --train`` (the quickstart's job) once per session: the run dir."""
    out = tmp_path_factory.mktemp("sample-run")
    proc = run_cli("pipelines.run", "sample", "--out", str(out), "--workers", "2", "--train")
    run_dir = out / "sample"
    (run_dir / "cli-stdout.txt").write_text(proc.stdout)
    return run_dir
