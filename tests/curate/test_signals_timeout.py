"""A hostile page that stalls the quality signals costs its own time limit, not the task's.

The page is an English article (it passes language ID) followed by the remains of a binary blob after a
lossy transcoding: 40,000 U+FFFD and no space. spaCy's tokenizer is super-linear on such a run
(4,000 characters 2.0 s, 50,000 more than 3 minutes); the signals step runs each document in a
sandbox child with `signals.timeout` seconds, so the page is dropped with reason `timeout`
(removed/signals/, counted) and the articles around it are curated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.article_pages import article_page
from tests.support.cli import run_cli
from tests.support.warc_writer import Page, write_pages

BLOB = "\ufffd".encode() * 40_000


@pytest.mark.e2e
def test_a_page_that_stalls_the_signals_is_dropped_and_the_task_goes_on(tmp_path: Path) -> None:
    article = article_page(1)
    body = article.body.replace(b"</article>", b"<p>" + BLOB + b"</p></article>")
    hostile = Page("https://hostile.example/blob", body)
    warc = tmp_path / "hostile.warc.gz"
    write_pages([article_page(0), hostile, article_page(2)], warc)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("name: short-signals\nsignals: {timeout: 2.0}\n")
    out = tmp_path / "out"
    run_cli("pipelines.run", str(warc), "--out", str(out), "--workers", "1", "--no-dedup", "--recipe", str(recipe))
    run = out / "hostile"  # local files name their run folder (pipelines.sources.local_dump_name)
    steps = {s["id"]: s for s in json.loads((run / "stats.json").read_text())["stages"]["curate"]["steps"]}
    assert steps["signals"]["in"] == 3
    assert steps["signals"]["dropped_by_reason"] == {"timeout": 1}
    removed = pq.read_table(run / "removed" / "signals").to_pylist()
    assert [(r["url"], r["filter_reason"]) for r in removed] == [(hostile.url, "timeout")]
    curated = pq.read_table(run / "curated").to_pylist()
    assert hostile.url not in {r["url"] for r in curated} and len(curated) == 2
