"""Shared fixtures for the tokenizer and mixtures tests: real text from shared/data as curated parquet.

Holds no tests. Data is read from ../shared/data (or $CC2MODEL_SHARED_DATA) and written to pytest temp
folders; tests that need it skip when it is absent.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.shared_data import EXTRACTION_SETS, shared_data_dir, warc_sample_files, write_extraction_warc

WEB_SETS = ("html_extraction_aeb", "html_extraction_readability", "html_extraction_wcxb")
_CACHE: dict[str, Any] = {}


def shared_data() -> Path:
    """The shared data folder, or skip the calling test."""
    root = shared_data_dir()
    if not root.is_dir():
        pytest.skip(f"shared data not found at {root}")
    return root


def web_documents() -> list[dict[str, Any]]:
    """Real web page texts (extraction ground truths plus CCNet samples) as curated-style rows."""
    if "web" not in _CACHE:
        root = shared_data()
        rows = []
        for name in WEB_SETS:
            with open(root / name / "ground_truth.jsonl", encoding="utf-8") as handle:
                for line in handle:
                    rec = json.loads(line)
                    if rec.get("text"):
                        rows.append(_row(f"{name}/{rec['id']}", rec["text"], rec.get("url")))
        with open(root / "cc_web_text_samples" / "docs.jsonl", encoding="utf-8") as handle:
            for line in handle:
                rec = json.loads(line)
                rows.append(_row(rec["id"], rec["text"], rec["id"]))
        _CACHE["web"] = rows
    return _CACHE["web"]


def wiki_articles() -> list[dict[str, Any]]:
    """WikiText-2 validation articles as curated-style rows (a second, distinct source)."""
    root = shared_data()
    rows = []
    with open(root / "wikitext2_articles" / "articles_valid.jsonl", encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            rec = json.loads(line)
            rows.append(_row(f"wiki/{i}", rec["text"], None, language="en"))
    return rows


def lingua_sentences() -> list[dict[str, str]]:
    """Sentences in 75 languages (lingua test data)."""
    root = shared_data()
    with gzip.open(root / "langid_lingua_sentences" / "sentences.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def is_held_out(row: dict[str, Any], every: int = 10) -> bool:
    """A fixed 1-in-`every` split by id hash: held-out documents are never trained on."""
    return int(hashlib.sha1(row["id"].encode()).hexdigest(), 16) % every == 0


def write_parquet(rows: list[dict[str, Any]], folder: Path, n_files: int = 1) -> list[Path]:
    """Write rows round-robin into `n_files` zstd parquet files, like the curate stage does."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n_files):
        path = folder / f"part_{i:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows[i::n_files]), path, compression="zstd")
        paths.append(path)
    return paths


def _row(doc_id: str, text: str, url: str | None, language: str = "en") -> dict[str, Any]:
    digest = int(hashlib.sha1(doc_id.encode()).hexdigest(), 16)
    return {
        "text": text,
        "id": doc_id,
        "url": url or "",
        "dump": "CC-MAIN-TEST",
        "date": "2024-01-01T00:00:00Z",
        "language": language,
        "language_score": 0.9,
        "minhash_cluster_size": 1 + digest % 5,
    }


def training_run_dir(factory: pytest.TempPathFactory) -> Path:
    """A run directory `out/<DUMP>/` with the training split of the web documents under curated/."""
    if "run_dir" not in _CACHE:
        run = factory.mktemp("run") / "CC-MAIN-TEST"
        write_parquet([r for r in web_documents() if not is_held_out(r)], run / "curated", n_files=3)
        _CACHE["run_dir"] = run
    return _CACHE["run_dir"]


# The curate stage's steps after language ID: what they drop is English text that was extracted but
# failed a quality rule. It is real web text, and at this corpus size every such character counts.
QUALITY_STEPS = ("gopher_repetition", "gopher_quality", "c4", "fineweb")


def extracted_web_documents(factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """English text the curate stage extracts from all real pages of shared/data (~2 min on 2 cores).

    The four `html_extraction_*` sets (as WARCs) and the `warc_samples` files go through
    `python -m pipelines.run --no-dedup`; kept are the curated documents plus those only a quality
    rule removed. A benchmark page keeps its ground-truth id (`<set>/<id>`), so `is_held_out` puts a
    page's extraction on the same side of the split as its ground-truth text.
    """
    if "extracted" not in _CACHE:
        from tests.support.cli import run_cli

        shared_data()  # skip when absent
        work = factory.mktemp("extracted")
        ids: dict[str, str] = {}
        warcs = []
        for set_name in EXTRACTION_SETS:  # one WARC per set: one curate task each, run in parallel
            warc = work / f"{set_name}.warc.gz"
            for rid, row in write_extraction_warc(warc, (set_name,)).items():
                ids[rid] = f"{set_name}/{row['id']}" if rid not in ids else ""  # "": same URL in two sets
            warcs.append(warc)
        inputs = [*map(str, warcs), *map(str, warc_sample_files())]
        run_cli("pipelines.run", *inputs, "--out", str(work), "--dump", "WEB", "--no-dedup", "--workers", "2")
        run = work / "WEB"
        folders = [run / "curated", *(run / "removed" / step for step in QUALITY_STEPS)]
        rows = []
        for path in sorted(p for folder in folders for p in folder.glob("*.parquet")):
            for rec in pq.read_table(path, columns=["text", "id", "url"]).to_pylist():
                doc_id = ids.get(rec["id"], f"warc/{rec['id']}")
                if rec["text"] and doc_id:
                    rows.append({**_row(doc_id, rec["text"], rec["url"]), "curated": path.parent.name == "curated"})
        _CACHE["extracted"] = rows
    return _CACHE["extracted"]


def web_training_documents(factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """All real web text of the training split: ground-truth texts, CCNet samples and extractions."""
    return [r for r in web_documents() + extracted_web_documents(factory) if not is_held_out(r)]


def small_tokenizer_dir(factory: pytest.TempPathFactory) -> Path:
    """A 4096-token BPE trained on the web training split (fast; for behaviour, not compression)."""
    if "small_tok" not in _CACHE:
        from tokenizer.train import train_tokenizer

        out = factory.mktemp("tok4k")
        train_tokenizer(training_run_dir(factory), out, vocab_size=4096, progress=False)
        _CACHE["small_tok"] = out
    return _CACHE["small_tok"]
