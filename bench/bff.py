"""BFF (DCLM's Bloom-filter dedup) against the MinHash path, end to end on the same input through ``dedup.run``.

    python -m bench.bff                       # 20,000 documents, 3 rounds, 1 worker
    python -m bench.bff --docs 50000 --rounds 5
    python -m bench.bff --dclm-bff PATH/TO/bff --rounds 0   # decisions against DCLM's own bff, then stop

The input is the planted set of ``dedup.evaluation.planted_bff_set`` (real ``shared/data`` text in ~300-word
documents, with whole-document and pasted-paragraph copies), grown to ``--docs`` with variants whose words
are each replaced with probability 0.1 (unique documents, few shared 13-grams). Each method runs as its own
``python -m dedup.run`` process, one after another in each round; its CPU seconds and peak RSS come from
``wait4`` (the process and its workers; the local executor with one worker runs the tasks in-process).
Documents per CPU-second, medians over rounds. First it prints the planted set's recall at DCLM's parameters
and the removals a filter at FP 0.01 makes beyond one at FP 1e-9 (which decides as an exact set, per the tests).

``--dclm-bff``: DCLM's binary (``cargo build --release`` in mlfoundations/dclm ``dedup/bff``; it needs crates.io)
runs ``bff bff --remove-type old-both`` with DCLM's parameters, one thread, over the planted set as one .jsonl
file; its output (documents left, texts after cuts) is compared with ours, at FP 1e-9 (hashing no longer
matters: the decisions must be equal) and at DCLM's 0.01 (its hash seeds are random per run).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.cli import ArgumentParser
from dedup.bff import BffDeduper, BffParams, BloomFilter, FilterSize, paragraph_windows
from dedup.evaluation import planted_bff_set
from tests.support.shared_data import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
METHODS = {
    "bff": ["--method", "bff", "--group-by", ""],
    "minhash (spaCy words, FineWeb)": ["--method", "minhash", "--group-by", ""],
    "minhash (whitespace words)": ["--method", "minhash", "--word-split", "whitespace", "--group-by", ""],
}


def build_input(folder: Path, docs: int, files: int, seed: int = 1) -> int:
    """The planted set, then variants of it (each word replaced with probability 0.1) up to ``docs``."""
    planted = planted_bff_set(shared_data_dir()).texts
    rng = random.Random(seed)
    vocabulary = rng.sample([w for t in planted[:300] for w in t.split()], 5000)
    texts = list(planted)
    while len(texts) < docs:
        base = planted[len(texts) % len(planted)]
        lines = [
            " ".join(w if rng.random() > 0.1 else rng.choice(vocabulary) for w in x.split()) for x in base.split("\n")
        ]
        texts.append("\n".join(lines))
    texts = texts[:docs]
    folder.mkdir(parents=True)
    for i in range(files):
        part = texts[i::files]
        table = pa.table({"id": [f"{i}-{j}" for j in range(len(part))], "text": part})
        pq.write_table(table, folder / f"{i:05d}.parquet")
    return sum(len(t.encode()) for t in texts)


def run_method(args: list[str], inp: Path, out: Path) -> dict:
    """One ``dedup.run``: CPU seconds (user + sys), peak RSS (MiB) and the summary counts."""
    cmd = [sys.executable, "-m", "dedup.run", "--input", str(inp), "--out", str(out), "--workers", "1", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stdout = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stdout}")
    clusters = out / "minhash" / "bff" / "clusters" if "bff" in args else out / "minhash" / "clusters"
    summary = json.loads((clusters / "summary.json").read_text())
    preflight = next((line for line in stdout.splitlines() if line.startswith("BFF filter:")), "")
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "removed": summary["removed"],
        "paragraphs_cut": summary.get("paragraphs_cut", 0),
        "filter_mib": summary.get("filter_bytes", 0) / 2**20,
        "preflight": preflight,
    }


def planted_quality() -> tuple[list[str], int]:
    """Recall of the planted copies at DCLM's parameters, and what FP 0.01 removes beyond FP 1e-9."""
    planted = planted_bff_set(shared_data_dir())
    texts = planted.texts
    runs = {}
    for rate in (1e-9, 0.01):
        counting = BffDeduper(BloomFilter(1, 1), BffParams(threshold=1.0))  # one bit, nothing removed: counts n-grams
        ngrams = sum(d.ngrams for d in counting.decide_all(texts))
        size = FilterSize.for_rate(ngrams, rate)
        runs[rate] = BffDeduper(BloomFilter(size.size_bytes, size.hashers)).decide_all(texts)
    bloom, exact = runs[0.01], runs[1e-9]
    doc_recall = sum(bloom[later].drop for _, later in planted.doc_copies) / len(planted.doc_copies)
    pasted = [
        bloom[later].drop or p not in bloom[later].text_after(texts[later]).split("\n")
        for _, later, p in planted.paragraph_copies
    ]
    paragraphs = sum(len(paragraph_windows(t)) for t in texts)
    extra_cuts = sum(len(set(b.cut) - set(e.cut)) for b, e in zip(bloom, exact, strict=True) if not b.drop)
    extra_drops = sum(b.drop and not e.drop for b, e in zip(bloom, exact, strict=True))
    print(f"planted set: {len(texts):,} documents, {paragraphs:,} paragraphs, {ngrams:,} 13-grams; "
          f"{len(planted.doc_copies)} document copies, {len(pasted)} pasted paragraphs")  # fmt: skip
    print(f"recall at FP 0.01: documents {doc_recall:.3f}, paragraphs {sum(pasted) / len(pasted):.3f}; "
          f"beyond FP 1e-9: {extra_cuts} paragraphs cut ({extra_cuts / paragraphs:.2%}), "
          f"{extra_drops} documents dropped ({extra_drops / len(texts):.2%})")  # fmt: skip
    return texts, ngrams


def dclm_parity(binary: str, texts: list[str], ngrams: int) -> None:
    """Documents DCLM's bff keeps, and their texts, against ours on the same input in the same order."""
    for rate in (1e-9, 0.01):
        size = FilterSize.for_rate(ngrams, rate)
        ours = BffDeduper(BloomFilter(size.size_bytes, size.hashers)).decide_all(texts)
        with tempfile.TemporaryDirectory(prefix="bench_bff_dclm_") as tmp:
            Path(tmp, "out").mkdir()
            with Path(tmp, "in.jsonl").open("w") as f:
                f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts))
            cmd = [binary, "bff", "--inputs", f"{tmp}/in.jsonl", "--output-directory", f"{tmp}/out",
                   "--expected-ngram-count", str(ngrams), "--fp-rate", str(rate), "--min-ngram-size", "13",
                   "--max-ngram-size", "13", "--filtering-threshold", "0.8", "--remove-type", "old-both",
                   "--threads", "1", "--no-progress-bar", "--no-save-bloom-filter"]  # fmt: skip
            subprocess.run(cmd, check=True, capture_output=True)
            with Path(tmp, "out", "in.jsonl").open() as f:
                theirs = {row["id"]: row["text"] for row in map(json.loads, f)}
        same_drop = sum((i not in theirs) == d.drop for i, d in enumerate(ours))
        both = [i for i, d in enumerate(ours) if not d.drop and i in theirs]
        same_text = sum(ours[i].text_after(texts[i]) == theirs[i] for i in both)
        print(
            f"DCLM's bff at FP {rate:g}: drops {len(texts) - len(theirs)}, ours {sum(d.drop for d in ours)}; same "
            f"decision on {same_drop}/{len(texts)} documents, same text on {same_text}/{len(both)} kept by both"
        )


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=20_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dclm-bff", default=None, help="DCLM's bff binary: compare decisions on the planted set")
    a = p.parse_args(argv)
    texts, ngrams = planted_quality()
    if a.dclm_bff:
        dclm_parity(a.dclm_bff, texts, ngrams)
    if a.rounds < 1:
        return
    with tempfile.TemporaryDirectory(prefix="bench_bff_") as tmp:
        size = build_input(Path(tmp, "in"), a.docs, a.files)
        print(f"input: {a.docs:,} documents, {size / 2**20:.1f} MiB of text, {a.files} files; {a.rounds} rounds")
        results: dict[str, list[dict]] = {name: [] for name in METHODS}
        for r in range(a.rounds):
            for m, (name, args) in enumerate(METHODS.items()):
                results[name].append(run_method(args, Path(tmp, "in"), Path(tmp, f"out_{r}_{m}")))
        print(next(x["preflight"] for x in results["bff"]))
        print("| method | documents / CPU-s | peak RSS (MiB) | removed documents | paragraphs cut | ratio to BFF |")
        print("|---|---|---|---|---|---|")
        bff_rate = a.docs / statistics.median(x["cpu_s"] for x in results["bff"])
        for name, runs in results.items():
            rate = a.docs / statistics.median(x["cpu_s"] for x in runs)
            rss = statistics.median(x["peak_rss_mib"] for x in runs)
            print(f"| {name} | {rate:,.0f} | {rss:,.0f} | {runs[0]['removed']:,} | {runs[0]['paragraphs_cut']:,} "
                  f"| {rate / bff_rate:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
