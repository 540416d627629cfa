"""``--languages eng`` (datatrove issue #388: every document silently dropped) is one line naming the
model's code, exit 2, before anything is written; the same for a recipe's ``language.languages``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli

pytestmark = pytest.mark.e2e


def _refused(*args: str) -> str:
    proc = run_cli("pipelines.run", "sample", *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    return proc.stderr


def test_three_letter_code_names_the_model_code(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stderr = _refused("--out", str(out), "--languages", "eng")
    assert "'eng'" in stderr and "'en'" in stderr and "lid.176.ftz" in stderr
    assert not out.exists()


def test_recipe_languages_are_checked_too(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nlanguage:\n  languages: [en, deu]\n")
    out = tmp_path / "out"
    stderr = _refused("--out", str(out), "--recipe", str(recipe))
    assert "'deu'" in stderr and "'de'" in stderr
    unknown = _refused("--out", str(out), "--languages", "xx-notalanguage")
    assert "unknown to lid.176.ftz" in unknown
    assert not out.exists()
