"""Cross-dump dedup: dump B loses its near-duplicates of dump A's documents, read from A's persisted
index alone (A's documents and signatures are deleted before B runs), and keeps everything else."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.io import get_datafolder

from dedup.buckets import band_signature_files
from dedup.config import DedupConfig
from dedup.evaluation import jaccard, near_duplicate
from dedup.index import BandIndex
from dedup.keys import MinhashKeyer
from dedup.records import CorruptFileError
from dedup.run import main, run_dedup


def _vocabulary(rng: random.Random, n: int = 4000) -> list[str]:
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(n)]


def _write(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True)
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(pa.Table.from_pylist(part), folder / f"{i:05d}.parquet")


def _ids(folder: Path) -> set[str]:
    return {i for p in folder.glob("*.parquet") for i in pq.read_table(p, columns=["id"])["id"].to_pylist()}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict:
    rng = random.Random(11)
    vocab = _vocabulary(rng)
    keyer = MinhashKeyer(DedupConfig())
    a_texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(150, 300))) for _ in range(300)]
    b_rows, jaccards = [], {}
    for i, text in enumerate(a_texts[:150]):
        target = rng.uniform(0.80, 0.97)
        variant, _ = near_duplicate(text.split(), target, keyer.shingles, rng, vocab)
        jaccards[f"b_dup{i}"] = jaccard(keyer.shingles(text), keyer.shingles(variant))
        b_rows.append({"id": f"b_dup{i}", "text": variant, "dump": "B"})
    for i in range(150):
        b_rows.append({"id": f"b_new{i}", "text": " ".join(rng.choice(vocab) for _ in range(200)), "dump": "B"})
    rng.shuffle(b_rows)
    root = tmp_path_factory.mktemp("dumps")
    _write(root / "A_docs", [{"id": f"a{i}", "text": t, "dump": "A"} for i, t in enumerate(a_texts)])
    _write(root / "B_docs", b_rows)
    run_dedup(str(root / "A_docs"), str(root / "A"), workers=1, write_index=True)
    index = json.loads((root / "A" / "minhash" / "index" / "index.json").read_text())
    assert index["group"] == "A" and index["documents"] == 300
    # the index the bucket stage wrote, against one written from the signature files alone (every key, unsorted)
    config = DedupConfig()
    reference_index = BandIndex(str(root / "A_docs"), str(root / "A_reference"), config)
    signatures = get_datafolder(str(root / "A" / "minhash" / "signatures"))
    for band in range(config.num_buckets):
        files = band_signature_files(signatures, band, config.fingerprint("minhash"))
        keys = np.concatenate([f.read_all()["key"] for f in files])
        reference_index.write(band, keys, sum(f.extra for f in files))
    reference = {p.name: p.read_bytes() for p in (root / "A_reference").iterdir()}
    # B may read nothing of A but its index: no documents, no signatures to recompute from
    shutil.rmtree(root / "A_docs")
    shutil.rmtree(root / "A" / "minhash" / "signatures")
    shutil.rmtree(root / "A" / "deduped")
    return {"root": root, "jaccards": jaccards, "reference": reference}


def test_the_bucket_stage_writes_the_index_a_stage_of_its_own_wrote(dumps) -> None:
    index = dumps["root"] / "A" / "minhash" / "index"
    assert len(dumps["reference"]) == 15  # 14 bands and index.json
    assert {p.name: p.read_bytes() for p in index.iterdir()} == dumps["reference"]


def test_a_band_task_is_skipped_only_when_its_pairs_and_index_keys_are_there(dumps, tmp_path: Path) -> None:
    """The bucket task of a band whose index keys (or index.json, written after band 0's keys) are missing runs
    again, though its pairs are there: both come from the same read, the completion marker after both. Also when
    its completion marker is there (band 3: a run directory of a version whose index was a stage of its own,
    stopped before it): the driver drops the marker of a band with pairs and no index part."""
    run_dedup(str(dumps["root"] / "B_docs"), str(tmp_path), workers=1, write_index=True)
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "logs" not in p.parts}
    index, done = tmp_path / "minhash" / "index", tmp_path / "logs" / "dedup_buckets" / "completions"
    (index / "band_03.keys").unlink()
    (index / "index.json").unlink()
    for rank in (0, 5):  # band 5's marker alone: its pairs and keys are there, it is skipped; band 3's kept
        (done / f"{rank:05d}").unlink()
    before = {p: p.stat().st_mtime_ns for p in written if p.exists()}
    run_dedup(str(dumps["root"] / "B_docs"), str(tmp_path), workers=1, write_index=True)
    assert {p: p.read_bytes() for p in written} == written
    changed = {p.relative_to(tmp_path).as_posix() for p in written if p.stat().st_mtime_ns != before.get(p)}
    rerun = {f"minhash/{part}" for part in ("buckets/band_00.pairs", "buckets/band_03.pairs", "index/index.json")}
    assert changed == {*rerun, "minhash/index/band_00.keys", "minhash/index/band_03.keys"}


def test_b_loses_its_near_duplicates_of_a(dumps) -> None:
    root = dumps["root"]
    config = DedupConfig(dedup_against=(str(root / "A" / "minhash" / "index"),))
    summary = run_dedup(str(root / "B_docs"), str(root / "B"), config, workers=1)
    removed = _ids(root / "B" / "removed" / "cross_dump")
    similar = {k for k, j in dumps["jaccards"].items() if j >= 0.85}
    assert len(similar) >= 60
    recall = len(removed & similar) / len(similar)
    assert recall >= 0.95
    assert not {r for r in removed if r.startswith("b_new")}  # no distinct document dropped
    kept = _ids(root / "B" / "deduped")
    assert {f"b_new{i}" for i in range(150)} <= kept
    assert summary["cross_dump"]["removed"] == len(removed)
    reasons = pq.read_table(root / "B" / "removed" / "cross_dump").column("filter_reason").to_pylist()
    assert set(reasons) == {"cross_dump_duplicate"}


def test_without_against_b_keeps_them(dumps, tmp_path: Path) -> None:
    run_dedup(str(dumps["root"] / "B_docs"), str(tmp_path), workers=1)
    assert len(_ids(tmp_path / "deduped")) == 300  # per dump (FineWeb's default): nothing in B is a duplicate


def test_cli_refuses_a_run_without_index(dumps, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--input", str(dumps["root"] / "B_docs"), "--out", str(tmp_path / "o"), "--dedup-against", str(tmp_path)])
    assert exit_.value.code == 2 and "no dedup index" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_index_of_another_config_is_refused(dumps) -> None:
    from dedup.index import check_index

    with pytest.raises(CorruptFileError, match="different dedup config"):
        check_index(dumps["root"] / "A" / "minhash" / "index", DedupConfig(num_buckets=20, hashes_per_bucket=5))
