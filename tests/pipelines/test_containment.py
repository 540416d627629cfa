"""Nothing is written outside --out (issue 30): names that become path components are refused in one line,
and a symbolic link planted inside an output folder is never written through.

Each case runs the CLI in-process (`main`), checks one `error:` line, exit status 2, and that the
listing of the test's whole temporary folder (which holds --out and every link target) is unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.cli import one_line
from common.lock import FolderLock, FolderUnavailable
from tests.pipelines.test_bad_inputs import _in_process
from tests.support.cli import REPO

SAMPLE = str(REPO / "pipelines" / "sample" / "sample.warc.gz")


def _listing(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in root.rglob("*")}  # fmt: skip


def _refused(tmp_path: Path, module: str, argv: list[str], needle: str) -> str:
    before = _listing(tmp_path)
    code, stderr = _in_process(module, argv)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert needle in lines[0], lines[0]
    assert "\x1b" not in stderr
    assert _listing(tmp_path) == before
    return lines[0]


@pytest.mark.parametrize("dump", ["../..", "..", ".", "", "/abs/elsewhere", "a/b", ".hidden", "\x1b[31mred", "x" * 300])
def test_a_dump_name_that_is_not_one_safe_component_is_refused(tmp_path: Path, dump: str) -> None:
    out = tmp_path / "deep" / "out"
    _refused(tmp_path, "pipelines.run", [SAMPLE, "--out", str(out), "--dump", dump], "--dump")


def _fake_run(root: Path) -> Path:
    run = root / "run"
    (run / "curated").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"config": {"recipe": {}}}))
    return run


@pytest.mark.parametrize("name", ["..", "../curated", "/tmp/x", "", "a/../../b", "\x1b]0;title\x07"])
def test_a_recipe_name_that_is_not_one_safe_component_is_refused(tmp_path: Path, name: str) -> None:
    run = _fake_run(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({"name": name}))
    _refused(tmp_path, "pipelines.refilter", [str(run), "--recipe", str(recipe)], "name")


def test_a_refilter_out_inside_the_runs_documents_is_refused(tmp_path: Path) -> None:
    run = _fake_run(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("name: ok\n")
    for out in (run / "curated", run / "curated" / "sub", run / "removed"):
        _refused(tmp_path, "pipelines.refilter", [str(run), "--recipe", str(recipe), "--out", str(out)], "apart")


def test_refilter_waits_for_nobody_while_the_run_is_written(tmp_path: Path) -> None:
    run = _fake_run(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("name: ok\n")
    with FolderLock(run, "pipelines.run"):
        _refused(tmp_path, "pipelines.refilter", [str(run), "--recipe", str(recipe)], "being written")


@pytest.mark.parametrize("name", ["../escape", "/abs", "..", "a/b"])
def test_an_ablation_dataset_name_that_is_not_one_safe_component_is_refused(tmp_path: Path, name: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"datasets": [{"name": name, "path": str(tmp_path)}], "tokens": 10, "tasks": {}}))
    _refused(tmp_path, "evals.ablate", [str(spec), "--out", str(tmp_path / "out")], "datasets[0].name")


def test_a_planted_lock_link_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "out" / "local"
    folder.mkdir(parents=True)
    (folder / ".lock").symlink_to(victim)
    with pytest.raises(FolderUnavailable):
        FolderLock(folder).acquire()
    assert victim.read_text() == "precious"


def test_a_planted_report_link_is_refused_before_the_run(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "out" / "sample"  # the run folder of the local WARC file sample.warc.gz
    run.mkdir(parents=True)
    (run / "report").symlink_to(elsewhere, target_is_directory=True)
    _refused(tmp_path, "pipelines.run", [SAMPLE, "--out", str(tmp_path / "out")], "symbolic link")


def test_one_line_escapes_control_characters_and_stays_short() -> None:
    line = one_line(ValueError("name \x1b[2J\x1b[31mred\x07 " + "y" * 5000))
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line
    assert len(line) <= 2000



def test_a_second_dedup_on_one_output_is_refused(tmp_path: Path) -> None:
    from tests.support.text_corpora import write_parquet

    docs = tmp_path / "docs"
    write_parquet([{"id": "a", "text": "one two three four five six", "dump": "d"}], docs)
    out = tmp_path / "dedup"
    with FolderLock(out, "dedup.run"):  # another dedup.run writing there
        _refused(tmp_path, "dedup.run", ["--input", str(docs), "--out", str(out)], "being written")
