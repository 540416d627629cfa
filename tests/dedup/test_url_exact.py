"""URL dedup (one capture per normalised URL, the newest) and exact dedup on simplified text, on a
constructed input whose duplicates are known, run through the real stages and executor."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup.config import DedupConfig
from dedup.run import run_dedup
from dedup.urlnorm import capture_time, normalize_url

_RNG = random.Random(0)
WORDS = ["".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_RNG.randint(3, 9))) for _ in range(5000)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(120))


def _write(folder: Path, rows: list[dict], files: int = 2) -> None:
    folder.mkdir(parents=True)
    per = -(-len(rows) // files)
    for f in range(files):
        part = rows[f * per : (f + 1) * per]
        pq.write_table(pa.Table.from_pylist(part), folder / f"{f:05d}.parquet")


def _ids(folder: Path) -> list[str]:
    return sorted(
        i for p in sorted(folder.glob("*.parquet")) for i in pq.read_table(p, columns=["id"])["id"].to_pylist()
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    """60 distinct pages; 15 URLs captured 2-4 times (spelled differently, different dates, edited text);
    10 texts copied exactly under new URLs and 10 copied with case/punctuation/digit changes."""
    rng = random.Random(3)
    rows, expect = [], {"url_removed": set(), "exact_raw": set(), "exact_simplified": set()}
    for i in range(60):
        rows.append(
            {
                "id": f"p{i}",
                "url": f"https://site{i}.example/a",
                "text": _text(rng),
                "dump": "D",
                "date": "2024-02-01T00:00:00Z",
            }
        )
    spellings = ["HTTPS://Site{i}.Example/a", "https://site{i}.example:443/a#top", "https://site{i}.example/a"]
    for i in range(15):
        for c in range(rng.randint(1, 3)):
            day = 2 + c if i % 2 else 20 - c  # newest capture last for odd URLs, first for even ones
            rows.append(
                {
                    "id": f"p{i}c{c}",
                    "url": spellings[c % 3].format(i=i),
                    "text": _text(rng),
                    "dump": "D",
                    "date": f"2024-02-{day:02d}T00:00:00Z",
                }
            )
    by_url: dict[str, list[dict]] = {}
    for r in rows:
        by_url.setdefault(normalize_url(r["url"]), []).append(r)
    for group in by_url.values():
        newest = max(group, key=lambda r: (capture_time(r["date"]), -rows.index(r)))
        expect["url_removed"] |= {r["id"] for r in group if r is not newest}
    kept_pages = [r for r in rows if r["id"] not in expect["url_removed"]]
    for i, src in enumerate(kept_pages[:10]):
        rows.append({**src, "id": f"copy{i}", "url": f"https://mirror.example/{i}"})
        expect["exact_raw"].add(f"copy{i}")
    for i, src in enumerate(kept_pages[10:20]):
        changed = src["text"].upper().replace(" ", ",  ", 3) + "!"
        rows.append({**src, "id": f"near{i}", "url": f"https://copy.example/{i}", "text": changed})
        expect["exact_simplified"].add(f"near{i}")
    # the same text in another dump is not a duplicate (per-dump dedup)
    rows.append({**kept_pages[0], "id": "otherdump", "url": "https://other.example/", "dump": "E"})
    folder = tmp_path_factory.mktemp("urlexact") / "docs"
    _write(folder, rows)
    return folder, expect


def test_url_then_exact_counts(corpus, tmp_path: Path) -> None:
    folder, expect = corpus
    config = DedupConfig(url_dedup=True, exact_dedup=True, exact_text="simplified")
    summary = run_dedup(str(folder), str(tmp_path), config, workers=1)
    url_removed = set(_ids(tmp_path / "removed" / "url_dedup"))
    exact_removed = set(_ids(tmp_path / "removed" / "exact"))
    assert url_removed == expect["url_removed"]
    assert exact_removed == expect["exact_raw"] | expect["exact_simplified"]
    assert summary["url"]["removed"] == len(expect["url_removed"]) > 10
    assert summary["exact"]["removed"] == 20
    assert summary["exact"]["documents"] == summary["url"]["documents"] - len(url_removed)  # exact reads URL's kept
    assert "otherdump" in _ids(tmp_path / "deduped")
    reasons = pq.read_table(tmp_path / "removed" / "url_dedup").column("filter_reason").to_pylist()
    assert set(reasons) == {"url_duplicate"}


def test_raw_exact_ignores_case_changed_copies(corpus, tmp_path: Path) -> None:
    folder, expect = corpus
    run_dedup(str(folder), str(tmp_path), DedupConfig(url_dedup=True, exact_dedup=True), workers=1)
    assert set(_ids(tmp_path / "removed" / "exact")) == expect["exact_raw"]


def test_minhash_fingerprint_unchanged_by_the_new_options() -> None:
    base = DedupConfig()
    assert base.fingerprint("minhash") == DedupConfig(url_dedup=True, exact_text="simplified").fingerprint("minhash")
    assert base.fingerprint("exact") == DedupConfig(url_dedup=True).fingerprint("exact")
    assert base.fingerprint("exact") != DedupConfig(exact_text="simplified").fingerprint("exact")


def test_normalize_url() -> None:
    assert normalize_url("HTTPS://Example.COM:443/Path?q=A#frag") == "https://example.com/Path?q=A"
    assert normalize_url("http://example.com") == "http://example.com/"
    assert normalize_url("http://example.com:8080/x") == "http://example.com:8080/x"
    assert capture_time("2024-02-20T12:00:00Z") == 1708430400
    assert capture_time(None) == capture_time("not a date") == 0
