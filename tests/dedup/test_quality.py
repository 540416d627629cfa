"""Signature quality and detection on real text, and the cross-check against datasketch.

Pairs are (real document, near-duplicate made with a controlled number of word edits); their
shingle Jaccard is computed exactly. Plagiarised short answers add real, human-made pairs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH
from datatrove.data import Document

from dedup.buckets import DedupBuckets
from dedup.config import DedupConfig
from dedup.evaluation import jaccard, lsh_probability, near_duplicate, paragraph_chunks, real_texts
from dedup.formats import node_doc
from dedup.keys import MinhashKeyer
from dedup.minhash import MinHasher, band_keys, permutation_params
from dedup.pairs import PAIR, PAIR_KIND
from dedup.records import open_records
from dedup.signatures import DedupSignatures
from tests.support.shared_data import shared_data_dir

LEVELS = (0.70, 0.75, 0.80, 0.85)
CONFIG = DedupConfig()


def shared_data() -> Path:
    return shared_data_dir()


@pytest.fixture(scope="module")
def data_dir() -> Path:
    data = shared_data()
    if not data.exists():
        pytest.skip(f"shared data not found at {data}")
    return data


@pytest.fixture(scope="module")
def keyer() -> MinhashKeyer:
    return MinhashKeyer(CONFIG)


@pytest.fixture(scope="module")
def pairs(data_dir, keyer) -> dict[str, np.ndarray]:
    """Near-duplicate pairs: exact Jaccard, estimated Jaccard, detected (a shared band)."""
    docs = [d for d in paragraph_chunks(real_texts(data_dir), 300) if len(d.split()) >= 80]
    rng = random.Random(20240611)
    vocabulary = rng.sample([w for d in docs for w in d.split()], 20000)
    bases, variants, exact, level = [], [], [], []
    for i, doc in enumerate(docs):
        words = doc.split()
        base = keyer.shingles(doc)
        # every document at every detection level; a quarter also at 0.9, 0.95 or in [0.05, 0.7]
        extra = {0: [0.9], 4: [0.95], 8: [rng.uniform(0.05, 0.7)]}.get(i % 12, [])
        chosen = [*LEVELS, *extra]
        for target in chosen:
            text, j = near_duplicate(words, target, keyer.shingles, rng, vocabulary, base=base)
            bases.append(i)
            variants.append(text)
            exact.append(j)
            level.append(target)
    base_sigs, _ = keyer.signatures(docs)
    var_sigs, positions = keyer.signatures(variants)
    assert len(positions) == len(variants)
    a, b = base_sigs[bases], var_sigs
    keys_a = band_keys(a, CONFIG.num_buckets, CONFIG.hashes_per_bucket)
    keys_b = band_keys(b, CONFIG.num_buckets, CONFIG.hashes_per_bucket)
    return {
        "exact": np.array(exact),
        "estimate": np.mean(a == b, axis=1),
        "detected": np.any(keys_a == keys_b, axis=1),
        "target": np.array(level),
    }


def test_estimate_mean_absolute_error(pairs):
    err = np.abs(pairs["estimate"] - pairs["exact"])
    print(f"MAE over {len(err)} pairs (J from {pairs['exact'].min():.2f} to 1): {err.mean():.4f}")
    assert err.mean() <= 0.05


@pytest.mark.parametrize("s", LEVELS)
def test_detection_rate_follows_the_lsh_curve(pairs, s):
    near = np.abs(pairs["exact"] - s) <= 0.01
    rate = pairs["detected"][near].mean()
    per_pair = lsh_probability(pairs["exact"][near], 14, 8).mean()
    theory = float(lsh_probability(s, 14, 8))
    print(f"s={s}: {near.sum()} pairs, detected {rate:.3f}, theory {theory:.3f} (per pair {per_pair:.3f})")
    assert near.sum() >= 500
    assert abs(rate - theory) <= 0.05
    assert abs(rate - per_pair) <= 0.05


def plagiarism_pairs(data_dir: Path, keyer: MinhashKeyer) -> list[tuple[str, float, bool]]:
    folder = data_dir / "neardup_plagiarised_short_answers"
    docs = {json.loads(line)["id"]: json.loads(line)["text"] for line in open(folder / "docs.jsonl")}
    labelled = [json.loads(line) for line in open(folder / "pairs.jsonl")]
    out = []
    for p in labelled:
        texts = [docs[p["doc_id"]], docs[p["source_id"]]]
        sigs, _ = keyer.signatures(texts)
        keys = band_keys(sigs, 14, 8)
        j = jaccard(keyer.shingles(texts[0]), keyer.shingles(texts[1]))
        out.append((p["category"], j, bool(np.any(keys[0] == keys[1]))))
    return out


def test_recall_at_high_similarity(pairs, data_dir, keyer):
    plag = plagiarism_pairs(data_dir, keyer)
    high = pairs["exact"] >= 0.85
    hits = int(pairs["detected"][high].sum()) + sum(d for _, j, d in plag if j >= 0.85)
    total = int(high.sum()) + sum(1 for _, j, _ in plag if j >= 0.85)
    print(f"recall at J >= 0.85: {hits}/{total} = {hits / total:.4f}")
    assert hits / total >= 0.95


def test_plagiarised_answers(data_dir, keyer):
    plag = plagiarism_pairs(data_dir, keyer)
    for category in ("cut", "light", "heavy", "non"):
        rows = [(j, d) for c, j, d in plag if c == category]
        print(
            category,
            f"{len(rows)} pairs, detected {sum(d for _, d in rows)}, J:",
            [round(j, 2) for j, _ in rows],
        )
    assert not any(d for c, _, d in plag if c == "non"), "an independently written answer was flagged"
    assert all(d for _, j, d in plag if j >= 0.85)


def test_same_candidates_as_datasketch_lsh(pairs, data_dir, keyer, tmp_path):
    docs = [d for d in paragraph_chunks(real_texts(data_dir), 300) if len(d.split()) >= 80][:400]
    rng = random.Random(7)
    vocabulary = [w for d in docs for w in d.split()]
    texts = list(docs)
    for d in docs[:300]:  # near-duplicates around the threshold, so some pairs are found and some not
        texts.append(near_duplicate(d.split(), rng.uniform(0.6, 0.95), keyer.shingles, rng, vocabulary)[0])
    documents = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    DedupSignatures(str(tmp_path / "sigs"), CONFIG).run(iter(documents), rank=0, world_size=1)
    for band in range(CONFIG.num_buckets):
        DedupBuckets(str(tmp_path / "sigs"), str(tmp_path / "buckets"), CONFIG).run(rank=band, world_size=14)
    ours = set()
    for band in range(CONFIG.num_buckets):
        edges = open_records(
            DedupBuckets(str(tmp_path / "sigs"), str(tmp_path / "buckets"), CONFIG).output_folder,
            f"band_{band:02d}.pairs",
            PAIR_KIND,
            CONFIG.fingerprint("minhash"),
            PAIR,
        ).read_all()
        groups: dict[int, list[int]] = {}
        for head, member in zip(node_doc(edges["a"]).tolist(), node_doc(edges["b"]).tolist(), strict=True):
            groups.setdefault(head, [head]).append(member)
        for members in groups.values():
            ours |= {(min(x, y), max(x, y)) for x in members for y in members if x != y}

    sigs, _ = keyer.signatures(texts)
    lsh = MinHashLSH(num_perm=112, params=(14, 8))
    hashes = [MinHash(num_perm=112, hashvalues=s, scheme="legacy") for s in sigs]
    for i, m in enumerate(hashes):
        lsh.insert(i, m)
    theirs = {(min(i, j), max(i, j)) for i, m in enumerate(hashes) for j in lsh.query(m) if j != i}
    print(f"candidate pairs: ours {len(ours)}, datasketch {len(theirs)}")
    assert len(ours) > 50
    assert ours == theirs


def test_datasketch_computes_the_same_signatures(data_dir, keyer):
    """datasketch's legacy scheme is datatrove's hash family truncated to 32 bits: feed it our
    shingles and permutations and it must produce our 32-bit signatures."""
    docs = paragraph_chunks(real_texts(data_dir), 300)[::50]
    a, b = permutation_params(112, CONFIG.seed)
    hasher32 = MinHasher(112, CONFIG.seed, bits=32)
    for text in docs:
        sh = keyer.shingles(text)
        m = MinHash(num_perm=112, scheme="legacy", permutations=(a, b), hashfunc=int)
        m.update_batch(sh.tolist())
        ours = hasher32.signatures(sh, np.array([0, len(sh)]))[0]
        assert np.array_equal(m.hashvalues, ours.astype(np.uint64))
