"""Access to ``../shared/data`` (real third-party data) for tests and benchmarks; never copied here.

Tests call ``require()`` and skip cleanly when the folder is absent.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from common.shared_data import shared_data_dir
from tests.support.warc_writer import Page, record_id_for, write_pages

EXTRACTION_SETS = (
    "html_extraction_aeb",
    "html_extraction_trafilatura",
    "html_extraction_readability",
    "html_extraction_wcxb",
)


def available() -> bool:
    return (shared_data_dir() / "README.md").is_file()


def require() -> Path:
    """The shared data folder, or a pytest skip when it is absent."""
    if not available():
        import pytest

        pytest.skip(f"shared data not found at {shared_data_dir()}")
    return shared_data_dir()


def ground_truth(set_name: str) -> list[dict]:
    """Ground-truth rows of one ``html_extraction_*`` set, each with the page bytes under ``html``."""
    folder = shared_data_dir() / set_name
    rows = []
    for line in (folder / "ground_truth.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["html"] = gzip.decompress((folder / row["html_file"]).read_bytes())
        row["page_url"] = row.get("url") or f"https://{set_name.replace('_', '-')}.example/{row['id']}"
        rows.append(row)
    return rows


def write_extraction_warc(out: Path, sets: tuple[str, ...] = EXTRACTION_SETS) -> dict[str, dict]:
    """All extraction-benchmark pages as one WARC; returns record id -> ground-truth row."""
    by_id: dict[str, dict] = {}
    pages = []
    for set_name in sets:
        for row in ground_truth(set_name):
            url = row["page_url"]
            if record_id_for(url) in by_id:  # the same URL in two sets: keep the first
                url = f"{url}#{set_name}"
            rid = record_id_for(url)
            row["set"] = set_name
            by_id[rid] = row
            pages.append(Page(url=url, body=row["html"], record_id=rid))
    write_pages(pages, out)
    return by_id


def warc_sample_files() -> list[Path]:
    """The real WARC files of ``warc_samples`` (WAT/WET excluded: they hold no HTML)."""
    folder = shared_data_dir() / "warc_samples"
    return sorted(p for p in folder.glob("*.warc.gz") if not p.name.endswith((".wat.gz", ".wet.gz")))
