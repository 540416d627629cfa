"""Record files (atomic, self-checking), external sort, star edges and union-find."""

from __future__ import annotations

import struct
from itertools import pairwise

import numpy as np
import pytest
from datatrove.io import get_datafolder

from dedup.clusters import cluster_table
from dedup.components import connected_components
from dedup.extsort import KEYED, ExternalSorter, merge_sorted
from dedup.pairs import StarEdges
from dedup.records import CorruptFileError, Header, RecordWriter, open_records

DT = np.dtype([("key", "<u8"), ("doc", "<u4")])
FP = 0xC0FFEE


def _write(folder, path: str, records: np.ndarray, extra: int = 0, rank: int = 0, world: int = 1) -> None:
    w = RecordWriter(folder, path, Header(b"SIGS", FP, rank, world, DT.itemsize))
    w.write(records)
    w.commit(extra=extra)


def _records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.empty(n, dtype=DT)
    r["key"] = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    r["doc"] = np.arange(n)
    return r


def test_roundtrip_and_counts(tmp_path):
    folder = get_datafolder(str(tmp_path))
    data = _records(1000)
    _write(folder, "a/00000.sig", data, extra=1234)
    f = open_records(folder, "a/00000.sig", b"SIGS", FP, DT, rank=0, world_size=1)
    assert f.n_records == 1000 and f.extra == 1234
    assert np.array_equal(np.concatenate(list(f.blocks(block_records=77))), data)


def test_unfinished_write_never_appears_under_the_final_name(tmp_path):
    folder = get_datafolder(str(tmp_path))
    w = RecordWriter(folder, "x.sig", Header(b"SIGS", FP, 0, 1, DT.itemsize))
    w.write(_records(10))
    assert not (tmp_path / "x.sig").exists() and (tmp_path / "x.sig.tmp").exists()
    w.abort()
    assert not (tmp_path / "x.sig.tmp").exists()
    with (
        pytest.raises(RuntimeError),
        RecordWriter(folder, "y.sig", Header(b"SIGS", FP, 0, 1, DT.itemsize)) as w2,
    ):
        w2.write(_records(3))
        raise RuntimeError("task killed")
    assert not list(tmp_path.glob("y.sig*"))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-7], "truncated or unfinished"),
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b[:20], "truncated"),
        (lambda b: b"garbage!" + b[8:], "not a cc2model dedup file"),
        (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum mismatch"),
        (lambda b: b[:-32] + b"\x00" * 12 + b[-32:], "truncated or padded"),
    ],
)
def test_damaged_files_are_detected_and_named(tmp_path, damage, message):
    folder = get_datafolder(str(tmp_path))
    _write(folder, "band_00/00003.sig", _records(50), rank=3, world=4)
    path = tmp_path / "band_00" / "00003.sig"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptFileError, match=message) as err:
        open_records(folder, "band_00/00003.sig", b"SIGS", FP, DT).read_all()
    assert str(path) in str(err.value)


def test_foreign_files_are_refused_with_their_name(tmp_path):
    folder = get_datafolder(str(tmp_path))
    # a datatrove signature file: bare (8 x uint64 hashes, uint32 doc) tuples, no header
    raw = b"".join(struct.pack("<8QI", *range(8), i) for i in range(20))
    (tmp_path / "datatrove.sig").write_bytes(raw)
    with pytest.raises(CorruptFileError, match="not a cc2model dedup file") as err:
        open_records(folder, "datatrove.sig", b"SIGS", FP, DT)
    assert "datatrove.sig" in str(err.value)
    _write(folder, "other.sig", _records(5))
    with pytest.raises(CorruptFileError, match="different dedup config"):
        open_records(folder, "other.sig", b"SIGS", FP + 1, DT)
    with pytest.raises(CorruptFileError, match="expected b'PAIR'"):
        open_records(folder, "other.sig", b"PAIR", FP, DT)
    with pytest.raises(CorruptFileError, match="this run has 3"):
        open_records(folder, "other.sig", b"SIGS", FP, DT, world_size=3)
    with pytest.raises(CorruptFileError, match="missing"):
        open_records(folder, "nope.sig", b"SIGS", FP, DT)


@pytest.mark.parametrize("buffer, fanin", [(10_000, 64), (257, 64), (100, 3)])
def test_external_sort_matches_numpy_sort(tmp_path, buffer, fanin):
    folder = get_datafolder(str(tmp_path))
    rng = np.random.default_rng(buffer)
    keys = rng.integers(0, 500, size=5000, dtype=np.uint64)  # many equal keys across runs
    nodes = np.arange(5000, dtype=np.uint64)
    sorter = ExternalSorter(folder, "runs", FP, buffer_records=buffer, max_fanin=fanin)
    for start in range(0, 5000, 333):
        sorter.add(keys[start : start + 333], nodes[start : start + 333])
    blocks = list(sorter.sorted_blocks())
    out = np.concatenate(blocks)
    assert all(x["key"][-1] <= y["key"][0] for x, y in pairwise(blocks))
    assert np.array_equal(out["key"], np.sort(keys))
    assert sorted(out["node"].tolist()) == nodes.tolist()
    assert np.array_equal(keys[out["node"].astype(np.int64)], out["key"])
    sorter.close()
    assert not (tmp_path / "runs").exists()


def test_unsorted_run_is_reported_by_name(tmp_path):
    folder = get_datafolder(str(tmp_path))
    sorter = ExternalSorter(folder, "runs", FP, buffer_records=100, max_fanin=64)
    sorter.add(np.arange(300, dtype=np.uint64)[::-1], np.arange(300, dtype=np.uint64))
    run = tmp_path / "runs" / "000001.run"
    bad = np.zeros(100, dtype=KEYED)
    bad["key"] = np.arange(100)[::-1]
    w = RecordWriter(folder, "runs/000001.run", Header(b"RUNS", FP, 0, 1, KEYED.itemsize))
    w.write(bad)
    w.commit()
    with pytest.raises(CorruptFileError, match="not sorted") as err:
        list(sorter.sorted_blocks())
    assert str(run) in str(err.value)


def test_merge_of_arbitrary_sorted_blocks():
    rng = np.random.default_rng(5)
    sources, everything = [], []
    for _ in range(7):
        recs = np.zeros(rng.integers(0, 400), dtype=KEYED)
        recs["key"] = np.sort(rng.integers(0, 50, size=len(recs)))
        everything.append(recs["key"])
        cuts = np.sort(rng.integers(0, len(recs) + 1, size=4))
        sources.append(iter(np.split(recs, cuts)))
    merged = np.concatenate(list(merge_sorted(sources)))
    assert np.array_equal(merged["key"], np.sort(np.concatenate(everything)))


def test_star_edges_span_block_boundaries():
    rec = np.zeros(9, dtype=KEYED)
    rec["key"] = [1, 1, 1, 2, 3, 3, 3, 3, 4]
    rec["node"] = np.arange(10, 19)
    edges = StarEdges()
    blocks = [rec[:2], rec[2:5], rec[5:6], rec[6:]]
    got = np.concatenate([edges.feed(block) for block in blocks])
    assert [(int(a), int(b)) for a, b in got] == [(10, 11), (10, 12), (14, 15), (14, 16), (14, 17)]


def _naive_components(edges: list[tuple[int, int]]) -> dict[int, int]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


@pytest.mark.parametrize("seed", range(4))
def test_union_find_matches_a_naive_one(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    a = rng.integers(0, n, size=n) * 7919 + (1 << 40)
    b = rng.integers(0, n, size=n) * 7919 + (1 << 40)
    nodes, roots = connected_components(a.astype(np.uint64), b.astype(np.uint64))
    expected = _naive_components(list(zip(a.tolist(), b.tolist(), strict=True)))
    assert dict(zip(nodes.tolist(), roots.tolist(), strict=True)) == expected


def test_long_chain_collapses_to_its_smallest_node():
    chain = np.arange(10_000, dtype=np.uint64)[::-1]
    nodes, roots = connected_components(chain[:-1], chain[1:])
    assert len(nodes) == 10_000 and set(roots.tolist()) == {0}


def test_cluster_table_keeps_the_first_document():
    a = np.array([5, 9, 9, (1 << 32) | 3], dtype=np.uint64)
    b = np.array([7, 5, 2, 2], dtype=np.uint64)
    t = cluster_table(a, b)
    rows = {int(r["node"]): (int(r["size"]), int(r["cluster"]), bool(r["keep"])) for r in t}
    assert rows == {
        2: (5, 0, True),
        5: (5, 0, False),
        7: (5, 0, False),
        9: (5, 0, False),
        (1 << 32) | 3: (5, 0, False),
    }
    t2 = cluster_table(np.array([1, 10], dtype=np.uint64), np.array([2, 11], dtype=np.uint64))
    assert t2["cluster"].tolist() == [0, 0, 1, 1] and t2["keep"].tolist() == [1, 0, 1, 0]
