"""The recipe's dedup options and ``--dedup-against`` through ``python -m pipelines.run``.

Dump A is curated and deduplicated with the default recipe (which keeps its MinHash index). Dump B holds
near-copies of two of A's pages, one text at two URLs and one URL captured twice; its recipe turns on URL
and exact dedup and it runs ``--dedup-against A`` after A's signatures are deleted (the index alone is read).
Each pass removes exactly its documents, to its own folder, and stats, report and inspect agree.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.article_pages import article_page
from tests.support.cli import run_cli
from tests.support.warc_writer import Page, record_id_for, write_pages

pytestmark = pytest.mark.e2e


def _near_copy(page: Page, url: str) -> Page:
    """The page with one word changed, at another URL (shingle Jaccard about 0.97)."""
    body = page.body.replace(b" the ", b" a ", 1)
    assert body != page.body
    return dataclasses.replace(page, url=url, body=body, record_id=record_id_for(url))


def _capture(page: Page, url: str, date: str) -> Page:
    return dataclasses.replace(page, url=url, date=date, record_id=record_id_for(f"{url}#{date}"))


def _urls(folder: Path) -> list[str]:
    return sorted(pq.read_table(folder, columns=["url"]).column("url").to_pylist()) if folder.exists() else []


def _run(tmp_path: Path, name: str, pages: list[Page], *args: str, check: bool = True):
    warc = tmp_path / name / "in.warc.gz"
    write_pages(pages, warc)
    out = tmp_path / "out"
    return run_cli("pipelines.run", str(warc), "--out", str(out), "--dump", name, "--workers", "2", *args, check=check)


def test_url_exact_and_cross_dump_passes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(tmp_path, "dumpA", [article_page(i) for i in range(5)])
    run_a = out / "dumpA"
    assert json.loads((run_a / "minhash" / "index" / "index.json").read_text())["documents"] == 5
    shutil.rmtree(run_a / "minhash" / "signatures")  # B must read A's index, not A's signatures

    near = [_near_copy(article_page(i), f"https://copies.example/{i}") for i in (0, 1)]
    twin = [article_page(5, url=f"https://twins.example/{k}") for k in (1, 2)]
    same_url = "https://news.example/today"
    older = _capture(article_page(6), same_url, "2024-02-01T00:00:00Z")
    newer = _capture(article_page(7), same_url, "2024-02-19T00:00:00Z")
    distinct = [article_page(8), article_page(9)]
    recipe = tmp_path / "b.yaml"
    recipe.write_text("name: b\ndedup:\n  url_dedup: true\n  exact_dedup: true\n")
    pages_b = [*near, *twin, older, newer, *distinct]
    proc = _run(tmp_path, "dumpB", pages_b, "--recipe", str(recipe), "--dedup-against", str(run_a))
    run_b = out / "dumpB"

    assert _urls(run_b / "curated") == sorted(p.url for p in pages_b)
    removed = {kind: _urls(run_b / "removed" / kind) for kind in ("url_dedup", "exact", "cross_dump", "minhash")}
    assert removed == {
        "url_dedup": [same_url],
        "exact": [twin[1].url],
        "cross_dump": sorted(p.url for p in near),
        "minhash": [],
    }
    deduped = pq.read_table(run_b / "deduped").to_pylist()
    assert sorted(r["url"] for r in deduped) == sorted([twin[0].url, same_url, *(p.url for p in distinct)])
    assert next(r["date"] for r in deduped if r["url"] == same_url) == newer.date  # the newest capture stays

    stages = json.loads((run_b / "stats.json").read_text())["stages"]
    for stage in (
        "dedup_url_signatures",
        "dedup_url_clusters",
        "dedup_exact_signatures",
        "dedup_buckets",
        "dedup_cross_dump_matches",
        "dedup_cross_dump_clusters",
        "dedup_filter",
    ):
        assert stages[stage]["tasks_completed"] == stages[stage]["tasks_total"], stage
    report = {s["step"]: s for s in json.loads((run_b / "report" / "report.json").read_text())["steps"]}
    assert (report["url_dedup"]["dropped"], report["exact"]["dropped"], report["minhash"]["dropped"]) == (1, 1, 2)
    assert report["minhash"]["reasons"] == {"cross_dump_duplicate": 2}
    assert all(report[k]["consistent"] for k in ("url_dedup", "exact", "minhash"))
    assert "cross_dump" in report["minhash"]["removed_dirs"]
    assert "url_dedup" in proc.stdout and "cross_dump" not in _run_inspect(run_b, "url_dedup")
    assert _run_inspect(run_b, "cross_dump").count("cross_dump_duplicate") == 2


def _run_inspect(run: Path, rule: str) -> str:
    return run_cli("pipelines.inspect", str(run), "--removed", rule).stdout


def test_dedup_against_is_checked_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cases = {
        ("--dedup-against", str(tmp_path / "nowhere")): "no dedup index",
        ("--dedup-against", str(tmp_path), "--no-dedup"): "needs the dedup stages",
    }
    for args, message in cases.items():
        proc = run_cli("pipelines.run", "sample", "--out", str(out), *args, check=False)
        assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and message in proc.stderr, proc.stderr
    assert not out.exists()
