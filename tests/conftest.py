"""Shared fixtures: one run of the bundled sample (CLI, refilter and report tests), one without dedup and the runs
of the distributed clustering resumed from it (Ray, Slurm and resume tests), a small real-text run directory and
the tokenizer trained on it (tokenizer and mixtures tests). Here, not imported into test modules: a session
fixture imported into two modules runs once per module."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import partial
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


@pytest.fixture(scope="session")
def local_sample_without_dedup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m pipelines.run sample --no-dedup`` to a local folder, once per session (the reference of the
    Ray and Slurm runs of the same command; the curation the distributed clustering's resumed runs start from):
    its run directory."""
    out = tmp_path_factory.mktemp("local-sample-without-dedup")
    run_cli("pipelines.run", "sample", "--no-dedup", "--out", str(out))
    return out / "sample"


@pytest.fixture(scope="session")
def distributed_sample(local_sample_without_dedup: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with the distributed clustering, uninterrupted (``tests/support/star_runs.py``): its run dir."""
    from tests.support.star_runs import uninterrupted

    return uninterrupted(local_sample_without_dedup, tmp_path_factory.mktemp("distributed-sample"))


@pytest.fixture(scope="session")
def labels_cut(local_sample_without_dedup: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with the distributed clustering stopped after its number stage and a label file cut short
    (``star_runs.stopped_and_cut`` with ``LABELS``), once per session (the tests resume copies of it): its run dir."""
    from tests.support.star_runs import LABELS, stopped_and_cut

    return stopped_and_cut(local_sample_without_dedup, tmp_path_factory.mktemp("labels-cut"), LABELS)


@pytest.fixture
def resume_cut(
    labels_cut: Path, distributed_sample: Path, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess]:
    """``star_runs.redone_on`` a copy of ``labels_cut`` in ``tmp_path``, against ``distributed_sample``: called
    with an executor's options, the resumed run's output."""
    from tests.support.star_runs import LABELS, redone_on

    return partial(redone_on, labels_cut, tmp_path, distributed_sample, LABELS)
