"""A recipe that drops every page: the run ends with its numbers (dedup has nothing to compare), and `--train`
ends in one line, where the dedup readers used to stop with datatrove's "No files found" traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipelines.test_containment import SAMPLE

REPO = Path(__file__).resolve().parents[2]
DROP_ALL = "name: drop_all\nrules:\n  gopher_quality:\n    min_word_count: 1000000\n"


@pytest.fixture(scope="module")
def drop_all(tmp_path_factory: pytest.TempPathFactory) -> Path:
    recipe = tmp_path_factory.mktemp("recipe") / "drop_all.yaml"
    recipe.write_text(DROP_ALL)
    return recipe


def _run(out: Path, recipe: Path, *flags: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "pipelines.run", SAMPLE, "--recipe", str(recipe), "--out", str(out), *flags]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_a_run_that_keeps_nothing_ends_with_its_numbers(tmp_path: Path, drop_all: Path) -> None:
    done = _run(tmp_path / "out", drop_all)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "curation kept no documents: deduplication skipped" in done.stderr
    assert "Traceback" not in done.stderr
    assert "kept: 0 documents" in done.stdout
    stats = json.loads((tmp_path / "out" / "sample" / "stats.json").read_text())
    steps = {s["id"]: s for s in stats["stages"]["curate"]["steps"]}
    quality = steps["gopher_quality"]  # every document it saw dropped: kept 0 (datatrove counts no "forwarded")
    assert quality["in"] > 0 and quality["kept"] == 0 and quality["dropped"] == quality["in"]
    assert "gopher_quality" in done.stdout.split("kept: 0 documents")[0]  # the summary table shows the step
    report = json.loads((tmp_path / "out" / "sample" / "report" / "report.json").read_text())
    assert report["steps"][-1]["step"] == "gopher_quality" and report["steps"][-1]["kept"] == 0


def test_train_on_a_run_that_keeps_nothing_is_one_line(tmp_path: Path, drop_all: Path) -> None:
    done = _run(tmp_path / "out", drop_all, "--train")
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: --train: curation kept no documents: no tokenizer or model can be trained on them"]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "sample" / "train").exists()
