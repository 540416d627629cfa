"""``python -m pipelines.inspect``: the documents it shows are the run's, selected as asked.

Expected counts come from ``stats.json`` and from the parquet files read here with pyarrow.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.inspect import build_parser, run_inspect
from tests.support.cli import run_cli

pytestmark = pytest.mark.e2e

HEADER = re.compile(r"^── \[(?P<where>[^\]·]+?)(?: · (?P<reason>[^\]]+))?\] (?P<url>\S*)$", re.M)


def inspect(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run_inspect(build_parser().parse_args(list(argv)), out=out)
    return code, out.getvalue()


def _step(sample_run: Path, step_id: str) -> dict:
    stats = json.loads((sample_run / "stats.json").read_text())
    steps = [s for stage in stats["stages"].values() for s in stage["steps"]]
    return next(s for s in steps if s["id"] == step_id)


def test_removed_rule_sample_shows_that_rules_documents(sample_run: Path) -> None:
    dropped = _step(sample_run, "gopher_quality")
    code, out = inspect(str(sample_run), "--removed", "gopher_quality", "--sample", "3")
    assert code == 0
    heads = list(HEADER.finditer(out))
    assert len(heads) == 3
    assert {h["where"] for h in heads} == {"removed/gopher_quality"}
    assert {h["reason"] for h in heads} <= set(dropped["dropped_by_reason"])
    assert f"3 of {dropped['dropped']:,} matching documents" in out
    assert "signals: " in out and "gopher_quality_word_count=" in out
    assert inspect(str(sample_run), "--removed", "gopher_quality", "--sample", "3")[1] == out  # seeded


def test_a_reason_selects_exactly_its_documents(sample_run: Path) -> None:
    want = _step(sample_run, "gopher_repetition")["dropped_by_reason"]["dup_line_frac"]
    code, out = inspect(str(sample_run), "--removed", "dup_line_frac", "--limit", "1000", "--chars", "40")
    assert code == 0
    heads = list(HEADER.finditer(out))
    assert len(heads) == want and {h["reason"] for h in heads} == {"dup_line_frac"}


def test_grep_finds_what_pyarrow_finds(sample_run: Path) -> None:
    files = sorted((sample_run / "deduped").glob("*.parquet"))
    rows = [r for f in files for r in pq.read_table(f, columns=["text", "url"]).to_pylist()]
    pattern = re.compile("leeds", re.IGNORECASE)
    want = [r["url"] for r in rows if pattern.search(r["text"] or "") or pattern.search(r["url"] or "")]
    assert want, "the sample should mention Leeds"
    code, out = inspect(str(sample_run.parent), "--grep", "leeds", "-i", "--sample", "1000", "--chars", "200")
    assert code == 0
    assert [h["url"] for h in HEADER.finditer(out)] == want
    assert f"{len(want)} of {len(want):,} matching documents" in out
    assert re.search("»leeds«", out, re.IGNORECASE)


def test_a_step_that_removed_nothing_and_an_unknown_rule(sample_run: Path, capsys) -> None:
    assert _step(sample_run, "c4")["dropped"] in (0, None)
    code, out = inspect(str(sample_run), "--removed", "c4")
    assert code == 0 and "no matching documents" in out
    code, _ = inspect(str(sample_run), "--removed", "no_such_rule")
    err = capsys.readouterr().err
    assert code == 2 and "no_such_rule" in err and "gopher_quality" in err and "minhash" in err
    assert inspect(str(sample_run), "--grep", "(unclosed")[0] == 2


def test_cli_entry_point(sample_run: Path) -> None:
    proc = run_cli("pipelines.inspect", str(sample_run), "--removed", "language", "--sample", "1", timeout=120)
    assert proc.returncode == 0
    heads = list(HEADER.finditer(proc.stdout))
    assert len(heads) == 1 and heads[0]["where"] in ("removed/language", "removed/extraction")
    proc = run_cli("pipelines.inspect", str(sample_run), "--list", timeout=120)
    assert "--removed takes" in proc.stdout and "minhash" in proc.stdout


@pytest.mark.parametrize("flag", ["--curated", None])
def test_kept_documents_default_to_deduped(sample_run: Path, flag: str | None) -> None:
    folder = "curated" if flag else "deduped"
    n = sum(pq.ParquetFile(f).metadata.num_rows for f in (sample_run / folder).glob("*.parquet"))
    code, out = inspect(str(sample_run), *([flag] if flag else []), "--sample", "2", "--chars", "10")
    assert code == 0 and f"2 of {n:,} matching documents" in out
    assert {h["where"] for h in HEADER.finditer(out)} == {"kept"}
