"""BFF (dedup/bff.py, dedup/bff_stage.py): the filter's size is DCLM's formula, a filter with FP -> 0 decides
as a plain exact-set implementation of DCLM's rules, planted paragraph and document copies of real text are
removed, and the pass through ``dedup.run`` keeps reasons, is deterministic and resumes (bad options are in
tests/pipelines/test_bad_inputs.py)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup.bff import (
    BffDecision,
    BffDeduper,
    BffParams,
    BloomFilter,
    FilterSize,
    false_positive_rate,
    filter_bytes,
    optimal_hashers,
    paragraph_windows,
    tokens,
)
from dedup.bff_stage import REMOVED_COLUMN, BffDedup, decisions_path
from dedup.config import DedupConfig
from dedup.evaluation import PlantedBff, planted_bff_set
from dedup.pipeline import build_dedup_stages
from dedup.run import run_dedup
from dedup.shingles import batch_shingles
from tests.support.shared_data import shared_data_dir

ROOT = Path(__file__).resolve().parents[2]


def reference(texts: list[str], params: BffParams) -> list[BffDecision]:
    """DCLM's old-both rules written plainly, one paragraph at a time, with a Python set of the same n-gram
    hashes instead of the Bloom filter."""
    seen: set[int] = set()
    out = []
    for text in texts:
        cut, contained, total = [], 0, 0
        for start, end in paragraph_windows(text):
            words = tokens(text[start:end])
            if len(words) < params.min_ngram:
                continue
            keys = batch_shingles([words], params.max_ngram)[0].tolist()
            found = sum(k in seen for k in keys)
            contained, total = contained + found, total + len(keys)
            if found / len(keys) > params.threshold:
                cut.append((start, end))
            else:
                seen.update(keys)
        left = "".join(
            text[a:b] for a, b in zip([0] + [e for _, e in cut], [s for s, _ in cut] + [len(text)], strict=True)
        )
        drop = (total > 0 and contained / total > params.threshold) or (bool(cut) and not left.strip())
        out.append(BffDecision(drop, [] if drop else cut, contained, total))
    return out


def run_bloom(texts: list[str], size: FilterSize) -> list[BffDecision]:
    return BffDeduper(BloomFilter(size.size_bytes, size.hashers)).decide_all(texts)


@pytest.fixture(scope="module")
def planted() -> PlantedBff:
    data = shared_data_dir()
    if not data.exists():
        pytest.skip(f"shared data not found at {data}")
    return planted_bff_set(data)


@pytest.fixture(scope="module")
def exact(planted) -> list[BffDecision]:
    return reference(planted.texts, BffParams())


def ngram_count(decisions: list[BffDecision]) -> int:
    """Every paragraph's n-grams count, cut or not."""
    return sum(d.ngrams for d in decisions)


@pytest.mark.parametrize(
    ("text", "want"),
    [  # the segments of Rust's unicode-segmentation split_word_bounds with a non-whitespace char (DCLM's tokenize)
        (
            "It's 3.14, e.g. U.S.A. don't!! stop",
            ["It's", "3.14", ",", "e.g", ".", "U.S.A", ".", "don't", "!", "!", "stop"],
        ),
        ("US \xad forces \ufeff x", ["US", " \xad", "forces", " \ufeff", "x"]),  # format characters join the space
        ("été 中文 한국어 :) 1,000.5 $5 a_b", ["été", "中", "文", "한국어", ":", ")", "1,000.5", "$", "5", "a_b"]),
    ],
)
def test_tokens_are_uax29_word_segments(text, want):
    assert tokens(text) == want


def test_paragraph_windows_and_cuts():
    """DCLM's windows: a later paragraph starts at its newline, so cutting it takes the newline before it."""
    text = "first\nsecond\n\nthird"
    assert paragraph_windows(text) == [(0, 5), (5, 12), (12, 13), (13, 19)]
    assert BffDecision(False, [(5, 12)], 0, 0).text_after(text) == "first\n\nthird"
    assert BffDecision(False, [(0, 5)], 0, 0).text_after(text) == "\nsecond\n\nthird"


@pytest.mark.parametrize("expected", [10_000, 3_000_000, 10**9])
@pytest.mark.parametrize("rate", [0.01, 0.001])
def test_filter_size_is_the_formula(expected, rate):
    """The smallest size meeting the rate with DCLM's hash count ceil(m/n ln 2); about -n ln p / (ln 2)^2 bits."""
    size = filter_bytes(expected, rate)
    fp = [false_positive_rate(s, expected, optimal_hashers(s, expected)) for s in (size, size - 1)]
    assert fp[0] <= rate < fp[1]
    closed_form = -expected * math.log(rate) / math.log(2) ** 2 / 8
    assert abs(size / closed_form - 1) < 0.01
    assert optimal_hashers(size, expected) == math.ceil(size * 8 / expected * math.log(2))


def test_filter_memory_is_its_size():
    """A filled filter's resident memory grows by its computed size (a fresh interpreter, VmRSS)."""
    code = (
        "import numpy as np; from dedup.bff import BloomFilter, FilterSize\n"
        "rss = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) * 1024\n"
        "size = FilterSize.for_rate(50_000_000, 0.01)\n"
        "keys = np.random.default_rng(0).integers(0, 2**63, 20_000, dtype=np.uint64); before = rss()\n"
        "bloom = BloomFilter(size.size_bytes, size.hashers)\n"
        "bloom.add(bloom.locate(keys)); bloom.bits[:] |= 1\n"
        "print(size.size_bytes, rss() - before)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    size, grew = map(int, out.stdout.split())
    assert size == filter_bytes(50_000_000, 0.01) and abs(size * 8 / 50_000_000 - 9.585) < 0.1  # bits per n-gram
    assert 0.99 * size < grew < size + (4 << 20)  # + the 20k keys' temporaries


def test_fp_to_zero_equals_exact_set(planted, exact):
    """At a false-positive rate of 1e-9 the Bloom filter's decisions are the exact set's, document by document."""
    size = FilterSize.for_rate(ngram_count(exact), 1e-9)
    assert run_bloom(planted.texts, size) == exact


def test_planted_copies_removed(planted, exact):
    """DCLM's parameters (13-grams, 0.8, FP 0.01 at the actual n-gram count): later copies are removed with
    recall >= 0.95, and the Bloom filter removes almost nothing the exact set keeps."""
    texts = planted.texts
    bloom = run_bloom(texts, FilterSize.for_rate(ngram_count(exact), 0.01))
    doc_recall = np.mean([bloom[later].drop for _, later in planted.doc_copies])

    def pasted_removed(later: int, paragraph: str) -> bool:
        return bloom[later].drop or paragraph not in bloom[later].text_after(texts[later]).split("\n")

    paragraph_recall = np.mean([pasted_removed(later, p) for _, later, p in planted.paragraph_copies])
    assert doc_recall >= 0.95 and paragraph_recall >= 0.95, (doc_recall, paragraph_recall)
    paragraphs = sum(len(paragraph_windows(t)) for t in texts)
    extra_cuts = sum(len(set(b.cut) - set(e.cut)) for b, e in zip(bloom, exact, strict=True) if not b.drop)
    extra_drops = sum(b.drop and not e.drop for b, e in zip(bloom, exact, strict=True))
    assert extra_cuts / paragraphs < 0.002 and extra_drops / len(texts) < 0.002, (extra_cuts, extra_drops)


def _write_parquet(texts: list[str], folder: Path, files: int = 3) -> None:
    """Contiguous slices, so reading the files in order reads ``texts`` in order."""
    folder.mkdir(parents=True)
    bounds = np.linspace(0, len(texts), files + 1).astype(int)
    for i in range(files):
        part = texts[bounds[i] : bounds[i + 1]]
        ids = [f"{i}-{j}" for j in range(len(part))]
        pq.write_table(pa.table({"id": ids, "text": part, "dump": ["d"] * len(part)}), folder / f"{i:05d}.parquet")


def test_dedup_run_keeps_reasons_and_order(planted, exact, tmp_path, capsys):
    """Through ``dedup.run`` (local executor, 2 workers): the decisions are the in-memory ones in input order,
    dropped documents carry ``bff_duplicate``, kept ones their cut-paragraph count and the cut text."""
    texts, want = planted.texts[:900], exact[:900]  # decisions depend only on the documents before
    _write_parquet(texts, tmp_path / "in")
    config = DedupConfig(method="bff", bff_expected_ngrams=ngram_count(want), bff_fp_rate=1e-9)
    summary = run_dedup(str(tmp_path / "in"), str(tmp_path / "out"), config, workers=2)
    size = FilterSize.for_rate(ngram_count(want), 1e-9)
    assert (
        f"BFF filter: {size.size_bytes / 2**20:,.1f} MiB ({size.size_bytes:,} bytes), {size.hashers} hashes"
        in (capsys.readouterr().out.splitlines()[0])
    )  # the pre-flight line, before any stage
    assert summary["bff"]["filter_bytes"] == size.size_bytes
    assert summary["bff"]["removed"] == sum(d.drop for d in want) > 30
    assert summary["bff"]["paragraphs_cut"] == sum(len(d.cut) for d in want) > 50
    removed = pq.read_table(tmp_path / "out" / "removed" / "bff")
    assert set(removed.column("filter_reason").to_pylist()) == {"bff_duplicate"}
    kept = pq.read_table(tmp_path / "out" / "deduped").sort_by("id").to_pylist()
    ids = [f"{i}-{j}" for i, n in enumerate(np.diff(np.linspace(0, 900, 4).astype(int))) for j in range(n)]
    expected = {ids[k]: (d.text_after(texts[k]), len(d.cut)) for k, d in enumerate(want) if not d.drop}
    assert {r["id"]: (r["text"], r[REMOVED_COLUMN]) for r in kept} == expected
    assert sorted(removed.column("id").to_pylist()) == sorted(ids[k] for k, d in enumerate(want) if d.drop)


def test_resumes_after_a_killed_rank(planted, tmp_path, monkeypatch):
    """Stopped while reading the third file (checkpoints after every file), the rerun loads the saved filter
    and writes the same decision files as an uninterrupted run."""
    _write_parquet(planted.texts[:600], tmp_path / "in", files=4)
    config = DedupConfig(method="bff", bff_expected_ngrams=500_000, bff_checkpoint_seconds=0)

    def bff_step(out: Path) -> BffDedup:
        stages = {name: steps for name, steps, _ in build_dedup_stages(str(tmp_path / "in"), str(out), config)}
        return stages["dedup_bff"][0]

    bff_step(tmp_path / "whole").run()
    step = bff_step(tmp_path / "resumed")
    real = step.documents

    def dies_at_rank_2(rank: int):
        if rank == 2:
            raise RuntimeError("killed")
        return real(rank)

    monkeypatch.setattr(step, "documents", dies_at_rank_2)
    with pytest.raises(RuntimeError, match="killed"):
        step.run()
    folder = tmp_path / "resumed" / "minhash" / "bff" / "clusters"
    assert (folder / "state.filter").exists() and not (folder / decisions_path(2)).exists()

    def only_from_rank_2(rank: int):
        assert rank >= 2, f"rank {rank} was done before the kill"
        return real(rank)

    monkeypatch.setattr(step, "documents", only_from_rank_2)
    step.run()
    whole = tmp_path / "whole" / "minhash" / "bff" / "clusters"
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in folder.iterdir()) and "state.filter" not in names
    for name in names:
        assert (whole / name).read_bytes() == (folder / name).read_bytes(), name
