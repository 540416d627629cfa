"""Local WARC files name their run folder after themselves (issue 31: every non-Common-Crawl run in one ``--out``
went to ``OUT/local/`` and the second was refused there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import ConfigError
from pipelines.recipe import load_recipe
from pipelines.run import build_parser, prepare_run
from pipelines.sources import resolve_paths, resolve_source


def _files(folder: Path, *names: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")  # resolving reads names only, never contents
    return [str(folder / name) for name in names]


def test_the_run_folder_is_the_file_or_the_folder_holding_them(tmp_path: Path) -> None:
    heldout = _files(tmp_path / "heldout", "a.warc.gz", "b.warc.gz")
    assert resolve_paths([str(tmp_path / "heldout")]).dump == "heldout"
    assert resolve_paths(heldout).dump == "heldout"
    assert resolve_paths(heldout[:1]).dump == "a"
    assert resolve_paths(_files(tmp_path / "x", "one.arc.gz")).dump == "one"
    assert resolve_paths(_files(tmp_path / "x", "my page (1).warc")).dump == "my_page__1_"
    assert resolve_paths(_files(tmp_path / "x", "..warc")).dump == "local"  # nothing safe is left of the name
    crawl = _files(tmp_path / "CC-MAIN-2024-10" / "segments", "c.warc.gz")
    assert resolve_paths(crawl).dump == "CC-MAIN-2024-10"
    assert resolve_source(heldout, dump="mine").dump == "mine"


def test_two_local_runs_in_one_out_get_two_folders_and_a_collision_names_dump(tmp_path: Path) -> None:
    recipe, argv = load_recipe(), ["x"]
    out = tmp_path / "out"
    first = resolve_paths(_files(tmp_path / "heldout", "a.warc.gz", "b.warc.gz"))
    second = resolve_paths(_files(tmp_path / "other", "c.warc.gz", "d.warc.gz"))
    assert prepare_run(recipe, first, out, argv)[0].root == out / "heldout"
    assert prepare_run(recipe, second, out, argv)[0].root == out / "other"
    assert prepare_run(recipe, first, out, argv)[0].root == out / "heldout"  # the same inputs resume there
    clash = resolve_paths([*_files(tmp_path / "heldout", "e.warc.gz"), str(tmp_path / "heldout" / "a.warc.gz")])
    assert clash.dump == "heldout"  # other files of the same folder
    with pytest.raises(ConfigError, match="name this run with --dump NAME"):
        prepare_run(recipe, clash, out, argv)


def test_the_help_says_how_the_folder_is_named() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "/data/heldout/*.warc.gz -> heldout" in text
