"""Decontamination wired into ``python -m pipelines.run``: eval passages planted into pages of a test
WARC are removed, exactly those, to ``removed/decontamination/`` with the n-gram and the eval set's name;
counts in ``stats.json``, the report and ``pipelines.inspect``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from filters.decontamination import WordTokens
from tests.support.article_pages import MAX_PAGES, article_page
from tests.support.cli import run_cli
from tests.support.warc_writer import write_pages

pytestmark = pytest.mark.e2e

# original passages (not in the sample's prose): the "eval set", one item per line
PASSAGES = (
    "The lighthouse keeper counted forty seven gulls on the northern rocks before the fog rolled in and "
    "hid the harbour from view.",
    "A violinist who practises scales slowly every morning will usually find that fast passages in the "
    "evening concert feel almost effortless.",
    "Nobody in the village remembered who had planted the enormous walnut tree beside the old mill, "
    "although everyone had a story about it.",
)
PLANTED = {1: 0, 4: 1, 7: 0}  # page -> passage planted into it; passage 2 is planted nowhere


def test_planted_eval_passages_are_removed_exactly(tmp_path: Path) -> None:
    eval_set = tmp_path / "heldout_passages.txt"
    eval_set.write_text("\n".join(PASSAGES) + "\n")
    pages = [article_page(i, extra=[PASSAGES[PLANTED[i]]] if i in PLANTED else ()) for i in range(MAX_PAGES)]
    warc = tmp_path / "warcs" / "planted.warc.gz"
    write_pages(pages, warc)
    recipe = tmp_path / "decontaminate.yaml"
    recipe.write_text(f"name: decontaminate\ndecontamination:\n  eval_sets: [{eval_set}]\n")
    out = tmp_path / "out"
    run_cli("pipelines.run", str(warc), "--out", str(out), "--dump", "planted", "--recipe", str(recipe),
            "--workers", "1", "--no-dedup")
    run = out / "planted"

    removed = pq.read_table(run / "removed" / "decontamination").to_pylist()
    urls = {page.url: i for i, page in enumerate(pages)}
    assert sorted(urls[r["url"]] for r in removed) == sorted(PLANTED)
    words = WordTokens()
    for row in removed:
        passage = " ".join(words(PASSAGES[PLANTED[urls[row["url"]]]]))
        assert row["contaminated_task"] == "heldout_passages"
        assert row["filter_reason"] == f"contaminated[heldout_passages]: {row['contaminated_ngram']}"
        assert len(row["contaminated_ngram"].split()) == 13 and row["contaminated_ngram"] in passage
    kept = pq.read_table(run / "curated", columns=["url"]).column("url").to_pylist()
    assert sorted(urls[u] for u in kept) == [i for i in range(MAX_PAGES) if i not in PLANTED]

    steps = {s["id"]: s for s in json.loads((run / "stats.json").read_text())["stages"]["curate"]["steps"]}
    decont = steps["decontamination"]
    assert (decont["in"], decont["dropped"]) == (MAX_PAGES, len(PLANTED))
    assert decont["counters"]["contaminated_heldout_passages"] == len(PLANTED)
    report = json.loads((run / "report" / "report.json").read_text())
    row = next(s for s in report["steps"] if s["step"] == "decontamination")
    assert row["reasons"] == {"contaminated[heldout_passages]": len(PLANTED)} and row["consistent"]

    shown = run_cli("pipelines.inspect", str(run), "--removed", "contaminated[heldout_passages]").stdout
    assert shown.count("removed/decontamination · contaminated[heldout_passages]: ") == len(PLANTED)


def test_unreadable_eval_set_is_one_line_before_any_work(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: r\ndecontamination:\n  eval_sets: [{tmp_path / 'missing.jsonl'}]\n")
    out = tmp_path / "out"
    proc = run_cli("pipelines.run", "sample", "--out", str(out), "--recipe", str(recipe), check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "decontamination.eval_sets[0]" in proc.stderr and "missing.jsonl" in proc.stderr
    assert not out.exists()
