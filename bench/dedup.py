"""Dedup benchmark: signature speed against datatrove and datasketch, and end-to-end dedup time.

    python -m bench.dedup                 # signatures, >= 2,000 real documents, 3 rounds
    python -m bench.dedup --e2e 100000    # plus dedup of 100k documents with 2 workers

Every method turns the same documents into 112 MinHash values (14 bands x 8 rows) of word
5-gram shingles after FineWeb-style normalisation, one method after another in each round.
"Per core" is documents per CPU-second of this process (the machine may be shared, so wall
time is also printed). Medians over the rounds are reported.
"""

from __future__ import annotations

import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash
from datasketch import MinHash
from datatrove.data import Document
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
from datatrove.utils.text import simplify_text

from common.cli import ArgumentParser
from dedup.config import DedupConfig
from dedup.evaluation import edit_words, jaccard, paragraph_chunks, real_texts
from dedup.keys import MinhashKeyer
from dedup.signatures import DedupSignatures
from dedup.text import spacy_english
from tests.support.shared_data import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    return shared_data_dir()


def datasketch_shingles(text: str) -> list[bytes]:
    words = simplify_text(text).split()
    return [" ".join(words[i : i + 5]).encode() for i in range(max(1, len(words) - 4))]


def run_datatrove(docs: list[Document], tmp: Path) -> None:
    step = MinhashDedupSignature(output_folder=str(tmp), config=MinhashConfig())
    step.run(iter(docs), rank=0, world_size=1)


def run_datasketch_per_doc(docs: list[Document], tmp: Path) -> None:
    for d in docs:
        m = MinHash(num_perm=112, seed=1)
        m.update_batch(datasketch_shingles(d.text))


def run_datasketch_shared(docs: list[Document], tmp: Path, hashfunc: Callable | None = None) -> None:
    perms = MinHash(num_perm=112, seed=1).permutations
    for d in docs:
        m = MinHash(num_perm=112, permutations=perms, scheme="affine32", hashfunc=hashfunc)
        m.update_batch(datasketch_shingles(d.text))


def run_datasketch_shared_xxh(docs: list[Document], tmp: Path) -> None:
    run_datasketch_shared(docs, tmp, hashfunc=xxhash.xxh32_intdigest)


def run_datasketch_bulk(docs: list[Document], tmp: Path) -> None:
    MinHash.bulk([datasketch_shingles(d.text) for d in docs], num_perm=112)


def run_ours(shingle_hash: str) -> Callable[[list[Document], Path], None]:
    def run(docs: list[Document], tmp: Path) -> None:
        step = DedupSignatures(str(tmp), DedupConfig(shingle_hash=shingle_hash))
        step.run(iter(docs), rank=0, world_size=1)

    return run


METHODS: dict[str, Callable[[list[Document], Path], None]] = {
    "datatrove MinhashDedupSignature": run_datatrove,
    "datasketch, one MinHash per doc": run_datasketch_per_doc,
    "datasketch, shared permutations": run_datasketch_shared,
    "datasketch, shared perms + xxh32": run_datasketch_shared_xxh,
    "datasketch, MinHash.bulk": run_datasketch_bulk,
    "ours (default, shingle_hash=text)": run_ours("text"),
    "ours (shingle_hash=words)": run_ours("words"),
}


def bench_signatures(docs: list[Document], rounds: int) -> dict[str, list[tuple[float, float]]]:
    spacy_english()  # both datatrove and ours load spaCy's tokenizer; keep that out of the timings
    MinhashDedupSignature(output_folder=tempfile.mkdtemp()).word_tokenizer.word_tokenize("warm up")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in METHODS}
    for r in range(rounds):
        for name, method in METHODS.items():
            with tempfile.TemporaryDirectory() as tmp:
                cpu, wall = time.process_time(), time.perf_counter()
                method(docs, Path(tmp))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            results[name].append((len(docs) / cpu, len(docs) / wall))
            per_core, per_second = len(docs) / cpu, len(docs) / wall
            print(f"  round {r + 1} {name:36s} {per_core:9.0f} docs/s/core ({per_second:.0f} wall)")
    return results


def check_equivalence(texts: list[str]) -> None:
    """How our default signatures and the whitespace word split compare with datatrove's."""
    keyer = MinhashKeyer(DedupConfig())
    oracle = MinhashDedupSignature(output_folder=tempfile.mkdtemp())
    sigs, positions = keyer.signatures(texts)
    same = 0
    for sig, i in zip(sigs, positions, strict=True):
        shingles = oracle.get_shingles(texts[i])
        same += shingles.size > 0 and np.array_equal(np.concatenate(oracle.get_signature(shingles)), sig)
    print(f"default signatures bit-identical to datatrove's: {same / len(texts):.1%} of {len(texts)} docs")
    tokenizer = oracle.word_tokenizer
    fast = MinhashKeyer(DedupConfig(word_split="whitespace"))
    identical, jaccards = 0, []
    for t in texts:
        spacy_words = tokenizer.word_tokenize(simplify_text(t))
        identical += spacy_words == simplify_text(t).split()
        jaccards.append(jaccard(keyer.shingles(t), fast.shingles(t)))
    print(
        f"word_split=whitespace vs datatrove's spaCy words: identical word lists "
        f"{identical / len(texts):.1%}, mean shingle-set Jaccard {np.mean(jaccards):.4f}"
    )


def synthetic_corpus(texts: list[str], n: int, out: Path, files: int, seed: int = 0) -> int:
    """n documents of 8-25 real sentences each; 10% are near-duplicates (1-4 word edits) of an
    earlier document, so clusters span files."""
    rng = random.Random(seed)
    pieces = (s.strip() for t in texts for s in t.replace("\n", " ").split(". "))
    sentences = [s + "." for s in pieces if len(s.split()) >= 6]
    vocabulary = [w for s in sentences[:5000] for w in s.split()]
    pool: list[str] = []
    per_file = -(-n // files)
    out.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        rows = []
        for i in range(f * per_file, min(n, (f + 1) * per_file)):
            if pool and rng.random() < 0.1:
                words = pool[rng.randrange(len(pool))].split()
                text = " ".join(edit_words(words, rng.randint(1, 4), rng, vocabulary))
            else:
                text = " ".join(rng.choice(sentences) for _ in range(rng.randint(8, 25)))
                if len(pool) < 20_000:
                    pool.append(text)
                else:
                    pool[rng.randrange(len(pool))] = text
            rows.append(
                {
                    "text": text,
                    "id": f"<urn:uuid:{i:08d}>",
                    "url": f"https://example.org/{i}",
                    "dump": "CC-MAIN-2024-10",
                    "date": "2024-02-20",
                    "language": "en",
                    "language_score": 0.9,
                }
            )
        pq.write_table(pa.Table.from_pylist(rows), out / f"part-{f:03d}.parquet", compression="zstd")
    return files


def bench_end_to_end(texts: list[str], n: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        files = synthetic_corpus(texts, n, Path(tmp, "in"), files=8)
        print(f"  generated {n} documents in {files} files ({time.perf_counter() - t0:.1f}s)")
        cmd = [sys.executable, "-m", "dedup.run", "--input", f"{tmp}/in", "--out", f"{tmp}/out"]
        cmd += ["--workers", str(workers)]
        t0, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        print("\n".join("  " + line for line in proc.stdout.strip().splitlines()))
        print(f"  END TO END: {n} documents deduplicated in {wall:.1f}s wall with {workers} workers")
        print(f"  CPU time of all its processes: {cpu:.1f}s = {cpu / workers:.1f}s on {workers} free cores")


def bench_and_report(chunks: list[str], rounds: int) -> None:
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(chunks)]
    words = sum(len(t.split()) for t in chunks)
    print(f"{len(docs)} real documents, {words / len(docs):.0f} words each on average")
    results = bench_signatures(docs, rounds)
    med = {name: statistics.median(c for c, _ in runs) for name, runs in results.items()}
    wall = {name: statistics.median(w for _, w in runs) for name, runs in results.items()}
    ours = med["ours (default, shingle_hash=text)"]
    best_ds = max(v for k, v in med.items() if k.startswith("datasketch"))
    print(f"\nmedian of {rounds} rounds, documents per CPU-second (wall):")
    for name in METHODS:
        print(f"  {name:36s} {med[name]:8.0f} ({wall[name]:.0f})   ours/this = {ours / med[name]:.2f}x")
    print(f"ours vs datatrove: {ours / med['datatrove MinhashDedupSignature']:.1f}x (goal >= 10x)")
    print(f"ours vs best datasketch mode: {ours / best_ds:.2f}x (goal >= 1.5x)")
    check_equivalence(chunks[::5])


def main() -> None:
    p = ArgumentParser()
    p.add_argument("--rounds", type=int, default=3, help="signature rounds (0: only --e2e)")
    p.add_argument("--docs", type=int, default=0, help="cap on documents (default: all, >= 2,000)")
    p.add_argument("--e2e", type=int, default=0, help="also dedup this many documents end to end")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    data = shared_data()
    if not data.exists():
        raise SystemExit(f"shared data not found at {data} (set CC2MODEL_SHARED_DATA)")
    texts = real_texts(data)
    chunks = paragraph_chunks(texts, 300)
    chunks = chunks[: a.docs] if a.docs else chunks
    if a.rounds > 0:
        bench_and_report(chunks, a.rounds)
    if a.e2e:
        bench_end_to_end(texts, a.e2e, a.workers)


if __name__ == "__main__":
    main()
