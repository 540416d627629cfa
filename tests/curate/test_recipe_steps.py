"""The recipe's phase-2 keys pick the curate stage's steps: WARC library, extractor, decontamination;
bad values are one-line ``ConfigError``s naming the key; the FineWeb recipe keeps the parity path."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import ConfigError
from curate.extract import MainTextExtractor
from curate.pipeline import DECONTAMINATION, EXTRACTION, build_curate_pipeline
from curate.warc import RobustWarcReader
from curate.warc_fastwarc import FastWarcReader
from filters.decontamination import Decontamination
from pipelines.recipe import load_recipe

DCLM = Path(__file__).resolve().parents[2] / "pipelines" / "recipes" / "dclm.yaml"


def _steps(recipe_path: Path | None, tmp_path: Path) -> list:
    config = load_recipe(recipe_path).curate
    return build_curate_pipeline(config, str(tmp_path), "paths.txt", "d", str(tmp_path / "c"), str(tmp_path / "r"))


def _recipe(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("name: r\n" + body)
    return path


def test_fineweb_recipe_keeps_the_parity_path(tmp_path: Path) -> None:
    steps = _steps(None, tmp_path)
    assert type(steps[0]) is RobustWarcReader
    extraction = next(s for s in steps if s.name == EXTRACTION)
    assert type(extraction) is MainTextExtractor
    assert not any(isinstance(s, Decontamination) for s in steps)
    recipe = load_recipe()
    assert not recipe.dedup.url_dedup and not recipe.dedup.exact_dedup


def test_dclm_recipe_reads_with_fastwarc_and_extracts_with_resiliparse(tmp_path: Path) -> None:
    steps = _steps(DCLM, tmp_path)
    assert isinstance(steps[0], FastWarcReader)
    extraction = next(s for s in steps if s.name == EXTRACTION)
    assert extraction.extract_fn.main_content is True and extraction.exclusion_writer is not None
    assert "pii" not in [s.name for s in steps]


def test_decontamination_runs_after_pii_and_before_the_writer(tmp_path: Path) -> None:
    eval_set = tmp_path / "passages.txt"
    eval_set.write_text("one two three four five six seven eight nine ten eleven twelve thirteen\n")
    steps = _steps(_recipe(tmp_path, f"decontamination:\n  eval_sets: [{eval_set}]\n  n_grams: 8\n"), tmp_path)
    names = [s.name for s in steps]
    assert names.index("pii") + 1 == names.index(DECONTAMINATION) == len(names) - 2
    step = steps[names.index(DECONTAMINATION)]
    assert step.config.n_grams == 8 and step.config.eval_sets == (str(eval_set),)
    schema = step.exclusion_writer.schema.names
    assert {"contaminated_ngram", "contaminated_task", "filter_reason"} <= set(schema)
    assert str(step.exclusion_writer.output_folder.path).endswith(f"r/{DECONTAMINATION}")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("extraction:\n  extractor: boilerpipe\n", "extraction.extractor must be one of trafilatura, resiliparse"),
        ("reader:\n  library: libarchive\n", "reader.library must be one of warcio, fastwarc"),
        ("decontamination:\n  eval_sets: [nowhere.txt]\n", "decontamination.eval_sets[0]: eval set not found"),
        ("decontamination:\n  eval_sets: [a.csv]\n", "unknown eval set format"),
        ("decontamination:\n  n_grams: 0\n", "n_grams must be a whole number in [1, 1024], got 0"),
        ("extraction:\n  timeout: 1.0e+30\n", "extraction.timeout must be a number in (0, 3600], got 1e+30"),
        (
            "rules:\n  gopher_quality:\n    max_word_count: 18446744073709551616\n",
            "max_word_count must be in [0, 1e+09]",
        ),
        ("dedup:\n  bff_expected_ngrams: 1125899906842624\n", "bff_expected_ngrams (or null: estimated) must be"),
        ("dedup:\n  exact_text: lowercase\n", "exact_text must be 'raw' or 'simplified'"),
        ("dedup:\n  url_dedupe: true\n", "unknown key(s) url_dedupe"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "a.csv").write_text("x\n")
    with pytest.raises(ConfigError) as err:
        load_recipe(_recipe(tmp_path, body.replace("a.csv", str(tmp_path / "a.csv"))))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_two_eval_sets_with_one_name_are_refused(tmp_path: Path) -> None:
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "wiki.txt").write_text("a passage of text\n")
    body = f"decontamination:\n  eval_sets: [{tmp_path / 'x' / 'wiki.txt'}, {tmp_path / 'y' / 'wiki.txt'}]\n"
    with pytest.raises(ConfigError, match="both name the eval set 'wiki'"):
        load_recipe(_recipe(tmp_path, body))


def test_relative_eval_set_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "wiki.txt").write_text("a passage of text\n")
    monkeypatch.chdir(tmp_path)
    config = load_recipe(_recipe(tmp_path, "decontamination:\n  eval_sets: [wiki.txt]\n")).curate
    assert config.decontamination.eval_sets == (str((tmp_path / "wiki.txt").resolve()),)
