"""Keep/drop parity with datatrove's own FineWeb pipeline on real pages (>= 99.5 %, every
disagreement listed). Both pipelines run at once, one per core, on the same WARC files: the
extraction-benchmark pages wrapped into a WARC, plus the real ``warc_samples`` files."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from tests.support import shared_data
from tests.support.parity import curate_decisions, disagreements, reference_decisions

pytestmark = pytest.mark.e2e

# Both sides get the same, generous per-page limit: on a loaded 2-core CI machine the 1 s default
# would make a slow page time out on one side only, which says nothing about the pipelines.
TIMEOUT = 10.0


def test_keep_drop_parity_with_datatrove(tmp_path: Path) -> None:
    shared_data.require()
    pages = tmp_path / "extraction_pages.warc.gz"
    truth = shared_data.write_extraction_warc(pages)
    files = [pages, *shared_data.warc_sample_files()]
    with ProcessPoolExecutor(2) as pool:
        ours_future = pool.submit(curate_decisions, files, None, TIMEOUT)
        reference_future = pool.submit(reference_decisions, files, TIMEOUT)
        ours, reference = ours_future.result(), reference_future.result()
    rows = disagreements(ours, reference)
    total = len(ours.seen | reference.seen)
    agreement = 1 - len(rows) / total
    listing = [
        f"{doc_id} kept by {who}; our reason: {reason}; url: {truth.get(doc_id, {}).get('page_url', '?')}"
        for doc_id, who, reason in rows
    ]
    report = {
        "documents": total,
        "agreement": agreement,
        "kept_ours": len(ours.kept),
        "kept_reference": len(reference.kept),
        "disagreements": listing,
    }
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "parity.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "disagreements"}), *listing, sep="\n")
    assert total > 1200
    assert agreement >= 0.995, "\n".join(listing)
    assert len(ours.kept) > 300
