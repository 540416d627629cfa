"""Shared fixtures: one run of the bundled sample (CLI, refilter and report tests), a small real-text run
directory and the tokenizer trained on it (tokenizer and mixtures tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.text_corpora import small_tokenizer_dir, training_run_dir


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> Path:
    """``python -m pipelines.run sample --train`` (the quickstart's job) once per session: the run dir."""
    out = tmp_path_factory.mktemp("sample-run")
    proc = run_cli("pipelines.run", "sample", "--out", str(out), "--workers", "2", "--train")
    run_dir = out / "sample"
    (run_dir / "cli-stdout.txt").write_text(proc.stdout)
    return run_dir


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory ``out/<DUMP>/`` whose ``curated/`` holds the training split of real web text."""
    return training_run_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tok4k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a 4096-token BPE trained on ``run_dir`` (for behaviour, not compression)."""
    return small_tokenizer_dir(tmp_path_factory)
