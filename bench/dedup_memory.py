"""Peak RSS of the dedup stages at growing corpus sizes (a one-off measurement, not a test).

    python -m bench.dedup_memory --sizes 10000 100000 1000000

Each measurement runs one stage in a fresh interpreter and reports its peak RSS and the RSS it
started from (interpreter, numpy, datatrove, spaCy). Signatures: a single task streaming
synthetic documents of 60-140 words. Buckets and clusters: synthetic signature files (keys
drawn at random, 10% of the documents copying all band keys of an earlier one), split over 8
tasks; one band's bucket task is measured, also at 3M documents (past the sort buffer). A
second cluster run keeps the number of duplicates fixed at 5,000 to show that clustering
memory follows duplicate pairs, not documents.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from datatrove.data import Document
from datatrove.io import get_datafolder

from common.cli import ArgumentParser
from dedup.buckets import DedupBuckets
from dedup.clusters import DedupClusters
from dedup.config import DedupConfig
from dedup.formats import SIG_KIND, SIGNATURE, signature_path
from dedup.records import Header, RecordWriter
from dedup.signatures import DedupSignatures
from dedup.text import spacy_english

ROOT = Path(__file__).resolve().parents[1]

CONFIG = DedupConfig()
TASKS = 8


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_documents(n: int, seed: int = 0) -> Iterator[Document]:
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}x{i * 7919 % 1000}" for i in range(50_000)])
    for i in range(n):
        words = vocabulary[rng.integers(0, len(vocabulary), size=int(rng.integers(60, 140)))]
        yield Document(text=" ".join(words.tolist()), id=str(i))


def write_signatures(folder: str, n: int, duplicates: int, bands: int, seed: int = 0) -> None:
    """Band key files for n documents over TASKS ranks; ``duplicates`` documents copy an earlier one."""
    rng = np.random.default_rng(seed)
    out = get_datafolder(folder)
    per_rank = -(-n // TASKS)
    copies = rng.choice(np.arange(1, n), size=duplicates, replace=False)
    sources = (rng.random(duplicates) * copies).astype(np.int64)
    fp = CONFIG.fingerprint("minhash")
    for band in range(bands):
        keys = rng.integers(0, 2**64, size=n, dtype=np.uint64)
        keys[copies] = keys[sources]
        for rank in range(TASKS):
            lo, hi = rank * per_rank, min(n, (rank + 1) * per_rank)
            records = np.empty(hi - lo, dtype=SIGNATURE)
            records["key"] = keys[lo:hi]
            records["doc"] = np.arange(hi - lo)
            header = Header(SIG_KIND, fp, rank, TASKS, SIGNATURE.itemsize)
            with RecordWriter(out, signature_path(band, rank), header) as w:
                w.write(records)
                w.commit(extra=hi - lo)


def child(stage: str, n: int, folder: str, duplicates: int) -> None:
    """Run one stage in this process; print a JSON line with its memory figures."""
    result: dict = {"stage": stage, "documents": n}
    if stage == "signatures":
        spacy_english()
        docs = synthetic_documents(n)
        result["start_mb"] = rss_mb()
        t0 = time.perf_counter()
        DedupSignatures(f"{folder}/sigs", CONFIG).run(docs, rank=0, world_size=1)
    elif stage in ("write", "write-band-0"):
        write_signatures(f"{folder}/sigs", n, duplicates, CONFIG.num_buckets if stage == "write" else 1)
        return
    elif stage == "buckets":
        result["start_mb"] = rss_mb()
        t0 = time.perf_counter()
        DedupBuckets(f"{folder}/sigs", f"{folder}/buckets", CONFIG).run(rank=0, world_size=CONFIG.num_buckets)
    elif stage == "other-buckets":
        step = DedupBuckets(f"{folder}/sigs", f"{folder}/buckets", CONFIG)
        for band in range(1, CONFIG.num_buckets):
            step.run(rank=band, world_size=CONFIG.num_buckets)
        return
    elif stage == "clusters":
        result["start_mb"] = rss_mb()
        t0 = time.perf_counter()
        step = DedupClusters(f"{folder}/buckets", f"{folder}/sigs", f"{folder}/clusters", CONFIG)
        step.run(rank=0, world_size=1)
        summary = json.loads(Path(folder, "clusters", "summary.json").read_text())
        result["pairs"] = int(step.stats["pairs"].total)
        result["removed"] = summary["removed"]
    else:
        raise SystemExit(f"unknown stage {stage}")
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["peak_mb"] = peak_mb()
    print(json.dumps(result))


def measure(stage: str, n: int, folder: str, duplicates: int = 0) -> dict | None:
    cmd = [sys.executable, "-m", "bench.dedup_memory", "--child", stage, str(n), folder, str(duplicates)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def main() -> None:
    p = ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--bucket-sizes", type=int, nargs="*", default=[3_000_000], help="bucket stage only")
    p.add_argument("--child", nargs=4, metavar=("STAGE", "N", "DIR", "DUPLICATES"))
    a = p.parse_args()
    if a.child:
        stage, n, folder, dups = a.child
        child(stage, int(n), folder, int(dups))
        return
    rows = []
    for n in a.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure("signatures", n, f"{tmp}/real"))
            for label, dups in (("", n // 10), (" (5,000 duplicates)", 5_000)):
                folder = f"{tmp}/syn{dups}"
                measure("write", n, folder, dups)
                bucket = measure("buckets", n, folder)
                measure("other-buckets", n, folder)
                clusters = measure("clusters", n, folder)
                assert bucket is not None and clusters is not None
                bucket["stage"] += label
                clusters["stage"] += label
                rows += [bucket, clusters] if not label else [clusters]
        for r in rows[-4:]:
            print(json.dumps(r), flush=True)
    for n in a.bucket_sizes:
        with tempfile.TemporaryDirectory() as tmp:
            measure("write-band-0", n, tmp, n // 10)
            rows.append(measure("buckets", n, tmp))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'stage':34s} {'documents':>10s} {'peak RSS MB':>12s} {'start MB':>9s} {'seconds':>8s}  pairs")
    for r in rows:
        if r:
            print(
                f"{r['stage']:34s} {r['documents']:>10,d} {r['peak_mb']:>12.0f} {r['start_mb']:>9.0f} "
                f"{r['seconds']:>8.1f}  {r.get('pairs', '')}"
            )


if __name__ == "__main__":
    main()
