"""``pipelines.run sample`` with the distributed dedup clustering (``--cluster-tasks 2``) on the local executor,
resumed after one of its star files was cut short after its task's receipt (``tests/support/star_runs.py``): the
whole curation run, where ``tests/dedup/test_star.py`` runs the cluster stages alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.run_compare import assert_same_run
from tests.support.star_runs import (
    LABELS,
    WORK,
    blocked,
    changed,
    identities,
    sample_command,
    stops_on_the_cut,
)

pytestmark = pytest.mark.e2e


def test_a_star_file_cut_short_after_its_receipt_is_redone_by_the_resumed_run(
    labels_cut: Path,
    distributed_sample: Path,
    tmp_path: Path,
) -> None:
    """The run stopped after the number stage, and that stage's task 0's label file for the write stage's task 0
    was cut short. While that task's inputs are gone, the resumed run stops before the write stage with one
    ``error:`` line naming the file and the missing input (exit 2) and changes nothing. With them back, it runs
    that task again, and only it: its files and receipt are new, every other file of the stages before keeps its
    inode and modification time (seen with the run stopped again where it stopped first, before the work folder is
    gone), and the finished run's documents, removed documents and stats are the uninterrupted run's."""
    run_dir = tmp_path / "sample"
    shutil.copytree(labels_cut, run_dir)
    before, stats = identities(run_dir, WORK), identities(run_dir, "stats")
    assert LABELS.files <= set(before)
    stops_on_the_cut(run_dir, tmp_path, LABELS)
    assert sorted(os.listdir(run_dir / "completions" / LABELS.stage)) == ["00000", "00001"]

    block = blocked(run_dir, LABELS.stop)
    redone = run_cli(*sample_command(tmp_path), check=False)
    assert redone.returncode == 1 and f"Is a directory: '{block}'" in redone.stderr, redone.stderr[-3000:]
    assert f": {LABELS.stage} task {LABELS.task} runs again" in redone.stderr
    assert changed(before, identities(run_dir, WORK)) == LABELS.files
    assert changed(stats, identities(run_dir, "stats")) == LABELS.stats
    block.rmdir()

    run_cli(*sample_command(tmp_path))
    assert not (run_dir / WORK).exists()
    assert_same_run(str(run_dir), distributed_sample)
