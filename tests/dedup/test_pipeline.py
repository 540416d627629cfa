"""End to end: parquet in, deduped parquet out; reruns, damaged state, exact pass, the CLI, and
datatrove's own MinHash pipeline as the oracle for the clusters."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.writers import JsonlWriter

from common.documents import DocumentWriter
from dedup.buckets import DedupBuckets
from dedup.clusters import DedupClusters
from dedup.config import DedupConfig
from dedup.filter import DedupFilter
from dedup.pipeline import build_dedup_stages, document_reader
from dedup.records import CorruptFileError
from dedup.run import run_dedup
from dedup.signatures import DedupSignatures

ROOT = Path(__file__).resolve().parents[2]
DUMP = "CC-MAIN-2024-10"


def _vocabulary(rng: random.Random, n: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def _edit(words: list[str], k: int, rng: random.Random, vocab: list[str]) -> list[str]:
    out = list(words)
    for _ in range(k):
        out[rng.randrange(len(out))] = rng.choice(vocab)
    return out


def make_corpus(folder: Path, n_files: int = 3, seed: int = 0) -> dict:
    """Unrelated documents plus planted duplicate groups; returns the expected outcome."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    rows: list[dict] = []
    groups: list[list[str]] = []

    def doc(text: str, ident: str, dump: str = DUMP) -> dict:
        return {
            "text": text,
            "id": ident,
            "url": f"https://example.org/{ident}",
            "dump": dump,
            "date": "2024-02-20",
            "language": "en",
            "language_score": 0.9,
            "fineweb_quality": None if ident.endswith("0") else rng.random(),
        }

    for i in range(120):
        words = [rng.choice(vocab) for _ in range(rng.randint(60, 250))]
        rows.append(doc(" ".join(words).capitalize() + ".", f"u{i}"))
        if i % 6 == 0:  # near-duplicates: a few words changed
            members = [f"u{i}"]
            for c in range(1 + i % 4):
                rows.append(doc(" ".join(_edit(words, 1 + c, rng, vocab)), f"u{i}n{c}"))
                members.append(f"u{i}n{c}")
            groups.append(members)
        if i % 10 == 1:  # exact copy, and the same text in another dump (kept: dedup is per dump)
            rows.append(doc(rows[-1]["text"], f"u{i}x"))
            rows.append(doc(rows[-1]["text"], f"u{i}other", dump="CC-MAIN-2023-50"))
            groups.append([f"u{i}", f"u{i}x"])
    rows.append(doc("Short but repeated", "short1"))
    rows.append(doc("short, but repeated!", "short2"))
    groups.append(["short1", "short2"])
    rows.append(doc("!!! ??? ...", "punctuation-only"))
    order = list(range(len(rows)))
    rng.shuffle(order)
    folder.mkdir(parents=True, exist_ok=True)
    position: dict[str, tuple[int, int]] = {}
    for f in range(n_files):
        part = [rows[i] for i in order[f::n_files]]
        pq.write_table(pa.Table.from_pylist(part), folder / f"part-{f:02d}.parquet")
        position |= {r["id"]: (f, k) for k, r in enumerate(part)}
    kept = {min(g, key=position.__getitem__) for g in groups}
    removed = {m for g in groups for m in g} - kept
    return {"ids": {r["id"] for r in rows}, "removed": removed, "kept_of_group": kept, "groups": groups}


def read_ids(folder: Path) -> list[dict]:
    rows: list[dict] = []
    for f in sorted(folder.glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("curated")
    return folder, make_corpus(folder)


@pytest.fixture(scope="module")
def deduped(corpus, tmp_path_factory) -> tuple[Path, dict]:
    folder, _ = corpus
    out = tmp_path_factory.mktemp("run")
    return out, run_dedup(str(folder), str(out), DedupConfig(), workers=1)


def test_duplicates_are_removed_and_the_first_is_kept(corpus, deduped):
    _, expected = corpus
    out, summary = deduped
    kept, removed = read_ids(out / "deduped"), read_ids(out / "removed" / "minhash")
    kept_ids, removed_ids = {r["id"] for r in kept}, {r["id"] for r in removed}
    assert removed_ids == expected["removed"]
    assert kept_ids | removed_ids == expected["ids"] and not kept_ids & removed_ids
    assert expected["kept_of_group"] <= kept_ids
    assert summary["minhash"]["removed"] == len(expected["removed"])
    assert {r["filter_reason"] for r in removed} == {"minhash_duplicate"}
    assert "filter_reason" not in pq.read_schema(next((out / "deduped").glob("*.parquet"))).names


def test_cluster_columns_and_schema(corpus, deduped):
    folder, expected = corpus
    out, _ = deduped
    rows = read_ids(out / "deduped") + read_ids(out / "removed" / "minhash")
    by_id = {r["id"]: r for r in rows}
    for group in expected["groups"]:
        sizes = {by_id[m]["minhash_cluster_size"] for m in group}
        ids = {by_id[m]["minhash_cluster_id"] for m in group}
        assert sizes == {len(group)} and len(ids) == 1 and ids != {-1}
    grouped = {m for g in expected["groups"] for m in g}
    singles = [r for r in rows if r["id"] not in grouped]
    assert {(r["minhash_cluster_size"], r["minhash_cluster_id"]) for r in singles} == {(1, -1)}
    source = pq.read_schema(next(folder.glob("*.parquet")))
    written = pq.read_schema(next((out / "deduped").glob("*.parquet")))
    assert written.names == [*source.names, "minhash_cluster_size", "minhash_cluster_id"]
    assert written.field("fineweb_quality").type == pa.float64()
    assert not list(out.rglob("*.tmp"))


def test_same_clusters_as_datatrove(corpus, tmp_path):
    """datatrove's four MinHash stages on the same input find the same clusters (ours without
    per-dump grouping, and ignoring the documents under 5 words that datatrove cannot hash)."""
    folder, _ = corpus
    config = DedupConfig(group_by=None, shingle_hash="text")
    ours = run_dedup(str(folder), str(tmp_path / "ours"), config, workers=1)
    assert ours["minhash"]["removed"] > 0
    cfg = MinhashConfig()
    n_files = len(list(folder.glob("*.parquet")))

    def reader() -> ParquetReader:
        return ParquetReader(str(folder), glob_pattern="*.parquet")

    dt = tmp_path / "datatrove"
    stages = [
        ([reader(), MinhashDedupSignature(str(dt / "sigs"), config=cfg)], n_files),
        ([MinhashDedupBuckets(str(dt / "sigs"), str(dt / "buckets"), config=cfg)], cfg.num_buckets),
        ([MinhashDedupCluster(str(dt / "buckets"), str(dt / "ids"), config=cfg, save_cluster_id=True)], 1),
        (
            [
                reader(),
                MinhashDedupFilter(
                    str(dt / "ids"), load_cluster_ids=True, exclusion_writer=JsonlWriter(str(dt / "removed"))
                ),
                JsonlWriter(str(dt / "kept")),
            ],
            n_files,
        ),
    ]
    for i, (steps, tasks) in enumerate(stages):
        LocalPipelineExecutor(steps, tasks=tasks, workers=1, logging_dir=str(dt / f"logs{i}")).run()
    theirs: dict[str, int] = {}
    for f in [*(dt / "kept").glob("*.gz"), *(dt / "removed").glob("*.gz")]:
        for line in gzip.open(f, "rt"):
            r = json.loads(line)
            theirs[r["id"]] = r["metadata"]["minhash_cluster_id"]
    rows = read_ids(tmp_path / "ours" / "deduped") + read_ids(tmp_path / "ours" / "removed" / "minhash")
    mine = {r["id"]: r["minhash_cluster_id"] for r in rows}

    def partition(labels: dict[str, int]) -> set[frozenset[str]]:
        groups: dict[int, set[str]] = {}
        for doc_id, label in labels.items():
            if label != -1 and not doc_id.startswith("short"):
                groups.setdefault(label, set()).add(doc_id)
        return {frozenset(g) for g in groups.values()}

    assert partition(mine) == partition(theirs)


def _files(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and "logs" not in p.parts}


def test_rerun_skips_and_repairs_only_what_is_missing(corpus, tmp_path):
    folder, expected = corpus
    out = tmp_path / "run"
    run_dedup(str(folder), str(out), DedupConfig(), workers=1)
    before = _files(out)
    run_dedup(str(folder), str(out), DedupConfig(), workers=1)
    assert _files(out) == before  # nothing recomputed
    # a task that died mid-way: its pairs file is gone, a temp file and sorted runs are left over
    (out / "minhash" / "buckets" / "band_05.pairs").unlink()
    (out / "logs" / "dedup_buckets" / "completions" / "00005").unlink()
    (out / "minhash" / "buckets" / "band_05.pairs.tmp").write_bytes(b"half written")
    (out / "minhash" / "buckets" / "band_05.runs").mkdir()
    # and a signature task that died after writing some of its band files
    rank1 = sorted((out / "minhash" / "signatures").glob("band_*/00001.sig"))
    sig_bytes = {p: p.read_bytes() for p in rank1}
    rank1[3].unlink()
    (out / "logs" / "dedup_signatures" / "completions" / "00001").unlink()
    run_dedup(str(folder), str(out), DedupConfig(), workers=1)
    after = _files(out)
    changed = {p for p in after if after[p] != before.get(p)}
    assert changed == {*map(str, rank1), str(out / "minhash" / "buckets" / "band_05.pairs")}
    assert all(p.read_bytes() == b for p, b in sig_bytes.items())  # recomputed identically
    assert {r["id"] for r in read_ids(out / "removed" / "minhash")} == expected["removed"]
    assert not list(out.rglob("*.tmp")) and not (out / "minhash" / "buckets" / "band_05.runs").exists()


def _signatures(folder: Path, sigs: Path, config: DedupConfig, tasks: int) -> None:
    for rank in range(tasks):
        DedupSignatures(str(sigs), config).run(
            document_reader(str(folder)).run(rank=rank, world_size=tasks), rank, tasks
        )


def test_damaged_or_foreign_signature_files_are_named(corpus, tmp_path):
    folder, _ = corpus
    config = DedupConfig()
    sigs = tmp_path / "sigs"
    _signatures(folder, sigs, config, 3)
    buckets = DedupBuckets(str(sigs), str(tmp_path / "buckets"), config)
    victim = sigs / "band_02" / "00001.sig"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) - 100])
    with pytest.raises(CorruptFileError, match="truncated") as err:
        buckets.run(rank=2, world_size=14)
    assert str(victim) in str(err.value)
    victim.write_bytes(data)
    stray = sigs / "band_02" / "00000.minhash.sig"  # a datatrove file dropped in the folder
    stray.write_bytes(b"\x00" * 36 * 4)
    with pytest.raises(CorruptFileError, match="unexpected file") as err:
        buckets.run(rank=2, world_size=14)
    assert "00000.minhash.sig" in str(err.value)
    stray.unlink()
    _signatures(folder, tmp_path / "sigs4", config, 4)  # a stale rank from a run with 4 tasks
    (sigs / "band_02" / "00003.sig").write_bytes((tmp_path / "sigs4" / "band_02" / "00003.sig").read_bytes())
    with pytest.raises(CorruptFileError, match="4 tasks"):
        buckets.run(rank=2, world_size=14)
    (sigs / "band_02" / "00003.sig").unlink()
    other = DedupConfig(seed=2)
    with pytest.raises(CorruptFileError, match="different dedup config"):
        DedupBuckets(str(sigs), str(tmp_path / "b2"), other).run(rank=2, world_size=14)
    buckets.run(rank=2, world_size=14)  # repaired: runs


def _drop_a_document(folder: Path, dst: Path) -> Path:
    """A copy of the corpus whose second file lost its first document."""
    dst.mkdir()
    for f in folder.glob("*.parquet"):
        table = pq.read_table(f)
        pq.write_table(table.slice(1) if f.name.endswith("01.parquet") else table, dst / f.name)
    return dst


def test_pairs_from_older_signatures_are_refused(corpus, tmp_path):
    folder, _ = corpus
    config = DedupConfig()
    sigs, buckets = tmp_path / "sigs", tmp_path / "buckets"
    _signatures(folder, sigs, config, 3)
    for band in range(14):
        DedupBuckets(str(sigs), str(buckets), config).run(rank=band, world_size=14)
    for f in sigs.glob("band_*/00001.sig"):  # signature task 1 runs again, on changed input
        f.unlink()
    changed = _drop_a_document(folder, tmp_path / "changed")
    DedupSignatures(str(sigs), config).run(document_reader(str(changed)).run(rank=1, world_size=3), 1, 3)
    clusters = DedupClusters(str(buckets), str(sigs), str(tmp_path / "clusters"), config)
    with pytest.raises(CorruptFileError, match="other signature files") as err:
        clusters.run()
    assert str(buckets / "band_00.pairs") in str(err.value)
    before = (buckets / "band_00.pairs").stat().st_mtime_ns
    DedupBuckets(str(sigs), str(buckets), config).run(rank=0, world_size=14)  # recomputes, no skip
    assert (buckets / "band_00.pairs").stat().st_mtime_ns != before


def test_changed_input_is_an_error_and_leaves_no_output(corpus, tmp_path):
    folder, _ = corpus
    out = tmp_path / "run"
    run_dedup(str(folder), str(out), DedupConfig(), workers=1)
    changed = _drop_a_document(folder, tmp_path / "changed")
    writer = DocumentWriter(str(tmp_path / "deduped"), schema_from=str(changed))
    steps = [document_reader(str(changed)), DedupFilter(str(out / "minhash" / "clusters")), writer]
    with pytest.raises(CorruptFileError, match="input changed"):
        data = None
        for step in steps:
            data = step(data, 1, 3)
        for _ in data:
            pass
    assert not (tmp_path / "deduped").exists() or not list((tmp_path / "deduped").iterdir())


def test_exact_pass_removes_identical_texts_first(corpus, tmp_path):
    folder, expected = corpus
    out = tmp_path / "run"
    summary = run_dedup(str(folder), str(out), DedupConfig(exact_dedup=True), workers=1)
    exact = {r["id"] for r in read_ids(out / "removed" / "exact")}
    near = {r["id"] for r in read_ids(out / "removed" / "minhash")}
    copies = [g for g in expected["groups"] if any(m.endswith("x") for m in g)]
    assert exact == {m for g in copies for m in g} - expected["kept_of_group"]
    assert exact | near == expected["removed"] and not exact & near
    assert {r["filter_reason"] for r in read_ids(out / "removed" / "exact")} == {"exact_duplicate"}
    assert summary["exact"]["removed"] == len(exact)


def test_stage_plan(corpus, tmp_path):
    folder, _ = corpus
    plan = build_dedup_stages(str(folder), tmp_path, DedupConfig(exact_dedup=True))
    assert [(name, tasks) for name, _, tasks in plan] == [
        ("dedup_exact_signatures", 3),
        ("dedup_exact_buckets", 1),
        ("dedup_exact_clusters", 1),
        ("dedup_signatures", 3),
        ("dedup_buckets", 14),
        ("dedup_clusters", 1),
        ("dedup_filter", 3),
    ]
    assert [n for n, _, _ in build_dedup_stages(str(folder), tmp_path, tasks=8)][0] == "dedup_signatures"


@pytest.mark.e2e
def test_command_line(corpus, tmp_path):
    folder, expected = corpus
    out = tmp_path / "cli"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "dedup.run", "--input", str(folder), "--out", str(out), "--workers", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"removed as near-duplicates: {len(expected['removed'])}" in proc.stdout
    assert str(out / "deduped") in proc.stdout and "summary.json" in proc.stdout
