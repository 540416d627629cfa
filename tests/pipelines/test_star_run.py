"""``pipelines.run sample`` with the distributed dedup clustering (``--cluster-tasks 2``) on the local executor,
resumed after one of its star files was cut short after its task's receipt (``tests/support/star_runs.py``): the
whole curation run, where ``tests/dedup/test_star.py`` runs the cluster stages alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.run_compare import assert_same_run, local_sample_without_dedup  # noqa: F401
from tests.support.star_runs import (
    CLUSTERS,
    FIRST_PASS,
    INPUTS,
    SIZES_OPEN,
    TASK_FILES,
    blocked,
    cut_short_error,
    distributed_sample,  # noqa: F401
    identities,
    sample_command,
    stopped_after_the_first_pass,
)

pytestmark = pytest.mark.e2e


def test_a_star_file_cut_short_after_its_receipt_is_redone_by_the_resumed_run(
    local_sample_without_dedup: Path,  # noqa: F811
    distributed_sample: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The run stopped after the first large-star pass, and that pass's task 1's edge file for task 0 was cut
    short. While that task's inputs are gone, the resumed run stops before the next pass with one ``error:`` line
    naming the file and the missing input (exit 2) and changes nothing. With them back, it runs that task again,
    and only it: its files and receipt are new, every other file of the route stage and the pass keeps its inode
    and modification time (seen with the run stopped again at the sizes stage, before the work folder is gone), and
    the finished run's documents, removed documents and stats are the uninterrupted run's."""
    run_dir = stopped_after_the_first_pass(local_sample_without_dedup, tmp_path)
    work = f"{CLUSTERS}/work"
    before = identities(run_dir, work)
    assert TASK_FILES <= set(before)
    stats = identities(run_dir, "stats")

    shutil.move(run_dir / INPUTS, tmp_path / "aside")
    gone = run_cli(*sample_command(tmp_path), check=False)
    assert gone.returncode == 2, gone.stderr[-3000:]
    assert gone.stderr.strip().splitlines()[-1].startswith(cut_short_error(run_dir)), gone.stderr[-3000:]
    assert identities(run_dir, work) == {name: ids for name, ids in before.items() if not name.startswith(f"{INPUTS}/")}
    assert sorted(os.listdir(run_dir / "completions" / FIRST_PASS)) == ["00000", "00001"]
    assert identities(run_dir, "stats") == stats  # no task ran
    shutil.move(tmp_path / "aside", run_dir / INPUTS)

    block = blocked(run_dir, SIZES_OPEN)
    redone = run_cli(*sample_command(tmp_path), check=False)
    assert redone.returncode == 1 and f"Is a directory: '{block}'" in redone.stderr, redone.stderr[-3000:]
    assert f": {FIRST_PASS} task 1 runs again" in redone.stderr
    after = identities(run_dir, work)
    assert {name for name in before if after[name] != before[name]} == TASK_FILES
    ran = identities(run_dir, "stats")
    assert {name for name in stats if ran[name] != stats[name]} == {f"stats/{FIRST_PASS}/00001.json",
                                                                    f"stats/{FIRST_PASS}.json"}  # fmt: skip
    block.rmdir()

    run_cli(*sample_command(tmp_path))
    assert not (run_dir / work).exists()
    assert_same_run(str(run_dir), distributed_sample)
