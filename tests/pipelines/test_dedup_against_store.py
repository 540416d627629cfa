"""``--dedup-against s3://...``: an earlier dump's MinHash index read from a bucket (moto on 127.0.0.1, real s3fs).

Dump A is curated and deduplicated locally; only its ``minhash/index/`` is copied to the bucket. Dump B, with
near-copies of two of A's pages, runs ``--dedup-against s3://earlier/dumpA``: exactly those two are removed as
cross-dump duplicates, as with A's local folder. A bucket that does not exist, or a run there without an
index, is one line before any work.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

from tests.support.article_pages import article_page
from tests.support.cli import REPO
from tests.support.s3_server import S3Server, s3, s3_server_session, subprocess_env  # noqa: F401
from tests.support.warc_writer import Page, record_id_for, write_pages

pytestmark = pytest.mark.e2e


def _near_copy(page: Page, url: str) -> Page:
    body = page.body.replace(b" the ", b" a ", 1)
    assert body != page.body
    return dataclasses.replace(page, url=url, body=body, record_id=record_id_for(url))


def _run(server: S3Server, tmp_path: Path, name: str, pages: list[Page], *args: str) -> subprocess.CompletedProcess:
    warc = tmp_path / name / "in.warc.gz"
    write_pages(pages, warc)
    command = [sys.executable, "-m", "pipelines.run", str(warc), "--out", str(tmp_path / "out"), "--dump", name,
               "--workers", "2", *args]  # fmt: skip
    env = subprocess_env(server, PYTHONPATH=str(REPO))
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def _urls(folder: Path) -> list[str]:
    return sorted(pq.read_table(folder, columns=["url"]).column("url").to_pylist()) if folder.exists() else []


def test_an_earlier_dump_index_in_a_bucket_removes_its_near_copies(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    first = _run(s3, tmp_path, "dumpA", [article_page(i) for i in range(5)])
    assert first.returncode == 0, first.stderr[-3000:]
    bucket = s3.make_bucket("earlier")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(str(tmp_path / "out/dumpA/minhash/index") + "/", "earlier/dumpA/minhash/index/", recursive=True)

    for against, expected in (("s3://no-such-bucket/dumpA", "bucket 'no-such-bucket' does not exist"),
                              (f"{bucket}/nothing", "no dedup index")):  # fmt: skip
        refused = _run(s3, tmp_path, "dumpX", [article_page(9)], "--dedup-against", against)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and expected in lines[0], refused.stderr[-3000:]
        assert not (tmp_path / "out" / "dumpX").exists()  # refused before any work

    near = [_near_copy(article_page(i), f"https://copies.example/{i}") for i in (0, 1)]
    distinct = [article_page(8), article_page(9)]
    second = _run(s3, tmp_path, "dumpB", [*near, *distinct], "--dedup-against", f"{bucket}/dumpA")
    assert second.returncode == 0, second.stderr[-3000:]
    run_b = tmp_path / "out" / "dumpB"
    assert _urls(run_b / "removed" / "cross_dump") == sorted(p.url for p in near)
    assert _urls(run_b / "deduped") == sorted(p.url for p in distinct)
