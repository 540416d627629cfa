"""``pipelines.refilter``: new thresholds over stored signals, no re-extraction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from common.config import ConfigError
from pipelines.recipe import DEFAULT_RECIPE, load_recipe
from tests.support.cli import run_cli

pytestmark = pytest.mark.e2e


def _count(folder: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet"))


def _ids(folder: Path) -> set[str]:
    return {i for f in folder.glob("*.parquet") for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()}


def _inspected_ids(run: Path, *args: str) -> list[str]:
    """The ids ``pipelines.inspect`` prints (every match: --limit above any count here)."""
    proc = run_cli("pipelines.inspect", str(run), *args, "--limit", "100000", "--chars", "40")
    return re.findall(r"^id (\S+)", proc.stdout, re.MULTILINE)


def _check_newly(run: Path, out: Path, stdout: str) -> None:
    """inspect --newly and the report of a refilter output name exactly the documents that changed sides, as the
    two curated/ folders' ids say, with where each was before."""
    dropped, kept = _ids(run / "curated") - _ids(out / "curated"), _ids(out / "curated") - _ids(run / "curated")
    assert f"newly dropped: {len(dropped)}" in stdout and f"newly kept: {len(kept)}" in stdout
    assert sorted(_inspected_ids(out, "--newly", "dropped")) == sorted(dropped)
    assert sorted(_inspected_ids(out, "--newly", "kept")) == sorted(kept)
    proc = run_cli("pipelines.report", str(out))
    assert f"{len(dropped):,} documents newly dropped, {len(kept):,} newly kept" in proc.stdout
    data = json.loads((out / "report" / "report.json").read_text())["refilter"]
    assert (data["newly_dropped"], data["newly_kept"], data["of"]) == (len(dropped), len(kept), str(run))
    moved = {"dropped": [c for c in data["changes"] if c["from"] == "curated"],
             "kept": [c for c in data["changes"] if c["to"] == "curated"]}  # fmt: skip
    assert sum(c["documents"] for c in moved["dropped"]) == len(dropped)
    assert sum(c["documents"] for c in moved["kept"]) == len(kept)
    for which, expected in (("dropped", dropped), ("kept", kept)):
        samples = data["samples"][which]
        assert len(samples) == min(len(expected), 6)
        assert all(s["previously"] == "kept" for s in samples) if which == "dropped" else all(
            s["previously"].startswith("removed/") for s in samples
        )
    assert "Newly dropped / newly kept" in (out / "report" / "index.html").read_text()


def _recipe(tmp_path: Path, name: str, **rules: dict) -> Path:
    data = yaml.safe_load(DEFAULT_RECIPE.read_text())
    data["name"] = name
    for rule, thresholds in rules.items():
        data["rules"][rule].update(thresholds)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_same_recipe_reproduces_the_run(sample_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "same"
    run_cli("pipelines.refilter", str(sample_run), "--recipe", str(DEFAULT_RECIPE), "--out", str(out))
    assert _count(out / "curated") == _count(sample_run / "curated")
    for rule in ("gopher_repetition", "gopher_quality", "c4", "fineweb"):
        assert _count(out / "removed" / rule) == _count(sample_run / "removed" / rule), rule


def test_stricter_threshold_removes_more_and_says_so(sample_run: Path, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "strict", gopher_quality={"min_word_count": 400})
    proc = run_cli("pipelines.refilter", str(sample_run), "--recipe", str(recipe))
    out = sample_run / "refilter" / "strict"
    before, after = _count(sample_run / "curated"), _count(out / "curated")
    assert after < before
    assert _count(out / "removed" / "gopher_quality") > _count(sample_run / "removed" / "gopher_quality")
    assert "curated -> gopher_quality" in proc.stdout and "gopher_short_doc" in proc.stdout
    assert "newly dropped: 0" not in proc.stdout
    _check_newly(sample_run, out, proc.stdout)
    for row in pq.read_table(next((out / "removed" / "gopher_quality").glob("*.parquet"))).to_pylist():
        assert row["gopher_quality_word_count"] < 400 or row["filter_reason"] != "gopher_short_doc"


def test_looser_threshold_brings_documents_back_edited(sample_run: Path, tmp_path: Path) -> None:
    recipe = _recipe(
        tmp_path,
        "loose",
        gopher_quality={"min_word_count": 5},
        c4={"min_sentences": 1},
        fineweb={"min_line_punct_ratio": 0.0, "max_short_line_ratio": 1.0, "max_char_dup_ratio": 1.0},
    )
    proc = run_cli("pipelines.refilter", str(sample_run), "--recipe", str(recipe))
    out = sample_run / "refilter" / "loose"
    assert _count(out / "curated") > _count(sample_run / "curated")
    assert "newly kept: 0" not in proc.stdout
    _check_newly(sample_run, out, proc.stdout)
    new_rows = pq.read_table(next((out / "curated").glob("*.parquet"))).to_pylist()
    assert all(r["filter_reason"] is None for r in new_rows)
    assert all("javascript" not in line.lower() for r in new_rows for line in r["text"].splitlines())


def test_refilter_refuses_bad_arguments(tmp_path: Path) -> None:
    proc = run_cli("pipelines.refilter", str(tmp_path), "--recipe", str(DEFAULT_RECIPE), check=False)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


def test_newly_needs_a_refilter_output(sample_run: Path) -> None:
    proc = run_cli("pipelines.inspect", str(sample_run), "--newly", "dropped", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is not one" in proc.stderr


def test_recipe_validation_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    for text, expected in [
        ("language:\n  threshold: high\n", "expected a number"),
        ("language:\n  model: /nope/lid.bin\n", "not found"),
        ("extraction: [1, 2]\n", "expected a mapping"),
        ("nonsense: 1\n", "unknown key"),
    ]:
        bad.write_text(text)
        try:
            load_recipe(bad)
        except ConfigError as err:
            assert expected in str(err) and "\n" not in str(err)
        else:
            raise AssertionError(f"accepted: {text!r}")
    assert load_recipe().curate.rules.fineweb.max_char_dup_ratio == 0.01


def test_eval_sets_in_the_recipe_decontaminate_again_and_back(sample_run: Path, tmp_path: Path) -> None:
    """Refilter reruns decontamination when the recipe names eval sets (the curate stage's step), and a
    refilter without them brings its documents back, their text as it was (not C4-edited or PII-
    formatted twice)."""
    from curate.refilter import Tally, build_refilter_pipeline
    from pipelines.refilter import refilter, run_steps

    kept = {
        row["id"]: row["text"]
        for f in (sample_run / "curated").glob("*.parquet")
        for row in pq.read_table(f).to_pylist()
    }
    target, text = next(
        (i, t) for i, t in sorted(kept.items()) if max(map(len, (ln.split() for ln in t.splitlines()))) >= 20
    )
    passage = " ".join(max((ln.split() for ln in text.splitlines()), key=len)[:20])
    planted = tmp_path / "planted.txt"
    planted.write_text(passage + "\n")
    data = yaml.safe_load(DEFAULT_RECIPE.read_text())
    data["name"] = "decont"
    data["decontamination"]["eval_sets"] = [str(planted)]
    recipe_path = tmp_path / "decont.yaml"
    recipe_path.write_text(yaml.safe_dump(data))

    once = tmp_path / "once"
    result = refilter(sample_run, load_recipe(recipe_path), once)
    removed = {
        row["id"]: row
        for f in (once / "removed" / "decontamination").glob("*.parquet")
        for row in pq.read_table(f).to_pylist()
    }
    assert target in removed and set(removed) <= set(kept)
    for row in removed.values():
        assert row["filter_reason"].startswith("contaminated[planted]: ") and row["contaminated_task"] == "planted"
        assert row["contaminated_ngram"] in row["filter_reason"]
    assert _count(once / "curated") == len(kept) - len(removed)
    assert result["moved"]["curated -> decontamination"] == len(removed)
    assert "decontamination" in result["steps"]

    tally, back = Tally(), tmp_path / "back"
    run_steps(build_refilter_pipeline(load_recipe().curate, once / "curated", once / "removed", back, tally))
    assert tally.moved[("decontamination", "curated")] == len(removed)
    restored = {
        row["id"]: row["text"] for f in (back / "curated").glob("*.parquet") for row in pq.read_table(f).to_pylist()
    }
    assert restored == kept
