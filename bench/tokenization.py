"""Tokenization speed on the same real documents: mixture build vs raw encode_batch vs datatrove.

    python -m bench.tokenization [--runs 5] [--repeat 2] [--tokenizer PATH] [--workers N] [--build-workers N]

The tokenizer defaults to a 32k BPE trained on the corpus first (untimed); pass
--tokenizer ../shared/data/reference_tokenizer_gpt_neo for the GPT-Neo one (HF encoder only: it has
a normalizer, see mixtures/encoders.py).

Goals (issue #5): build >= 0.8x raw `Tokenizer.encode_batch` (at most 20 % spent on shuffling and
writing) and >= 1.5x datatrove's `DocumentTokenizer`. Every figure is the median of --runs (>= 3) runs;
each run of the build and of datatrove starts from the parquet files and ends with shards on disk.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.cli import ArgumentParser
from mixtures.build import build_mixture
from mixtures.pool import available_cores
from tests.support.shared_data import shared_data_dir
from tokenizer.artifacts import load_tokenizer, resolve_tokenizer_file
from tokenizer.model import EOT
from tokenizer.train import train_tokenizer


def shared_data() -> Path:
    return shared_data_dir()


def real_documents(data: Path) -> list[str]:
    """Web pages, Wikipedia articles, Shakespeare by scene-sized chunks, sentences grouped per language."""
    texts: list[str] = []
    for name in ("html_extraction_aeb", "html_extraction_readability", "html_extraction_wcxb"):
        for line in open(data / name / "ground_truth.jsonl", encoding="utf-8"):
            text = json.loads(line).get("text")
            if text:
                texts.append(text)
    texts += [json.loads(line)["text"] for line in open(data / "cc_web_text_samples" / "docs.jsonl")]
    texts += [json.loads(line)["text"] for line in open(data / "wikitext2_articles" / "articles_valid.jsonl")]
    play = (data / "tinyshakespeare" / "input.txt").read_text()
    texts += [play[i : i + 8000] for i in range(0, len(play), 8000)]
    by_lang: dict[str, list[str]] = {}
    with gzip.open(data / "langid_lingua_sentences" / "sentences.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            rec = json.loads(line)
            by_lang.setdefault(rec["lang"], []).append(rec["text"])
    for sentences in by_lang.values():
        texts += [" ".join(sentences[i : i + 40]) for i in range(0, len(sentences), 40)]
    return texts


def write_corpus(texts: list[str], folder: Path, n_files: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n_files):
        rows = texts[i::n_files]
        table = pa.table({"text": rows, "id": [f"doc-{i}-{j}" for j in range(len(rows))]})
        pq.write_table(table, folder / f"part_{i:05d}.parquet", compression="zstd")


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2, help="copies of the corpus (more text per run)")
    parser.add_argument(
        "--tokenizer", help="tokenizer.json or folder; default: a 32k BPE trained on the corpus"
    )
    parser.add_argument("--workers", type=int, default=available_cores(), help="datatrove processes")
    parser.add_argument("--build-workers", type=int, default=1, help="build: 1 = threads, N = processes")
    parser.add_argument("--files", type=int, default=8, help="parquet files the corpus is split into")
    args = parser.parse_args()
    if args.runs < 3:
        parser.error("--runs must be at least 3 (medians)")
    texts = real_documents(shared_data()) * args.repeat
    work = Path(tempfile.mkdtemp(prefix="bench-tokenize-"))
    try:
        write_corpus(texts, work / "docs", args.files)
        if args.tokenizer:
            tok_file = resolve_tokenizer_file(args.tokenizer)
        else:  # what a mixture build normally runs with (and the fast encoder applies to)
            tok_file = train_tokenizer(work / "docs", work / "tok", vocab_size=32768, progress=False).path
        chars = sum(map(len, texts)) / 1e6
        print(
            f"{len(texts):,} documents, {chars:.1f} M chars, {available_cores()} cores, tokenizer {tok_file}"
        )
        cores = available_cores()
        build = (
            f"{args.build_workers} processes x {max(1, cores // args.build_workers)} Rust threads"
            if args.build_workers > 1
            else f"threads: tiktoken {cores} per call; HF {cores} Python threads, tokenizers' pool off"
        )
        print(
            f"median of {args.runs} interleaved runs; raw: tokenizers' pool ({cores} threads); "
            f"build: {build}; datatrove: {args.workers} processes, tokenizers' pool in each"
        )
        results = run_all(texts, work, tok_file, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours = results["mixture build"]
    print(f"build / raw encode_batch: {ours / results['raw encode_batch']:.2f}x (goal >= 0.8)")
    fast = results["raw encode_batch_fast"]
    print(f"build / raw encode_batch_fast (no offsets; what the build calls): {ours / fast:.2f}x")
    print(f"build / datatrove DocumentTokenizer: {ours / results['datatrove']:.2f}x (goal >= 1.5)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (shared machine)")


def run_all(texts: list[str], work: Path, tok_file: Path, args: argparse.Namespace) -> dict[str, float]:
    """Interleave the methods run by run (the machine is shared; noise then hits all alike)."""
    tok = load_tokenizer(tok_file)

    def raw() -> int:
        return sum(len(e.ids) + 1 for e in tok.encode_batch(texts))  # +1: the EOS each document gets

    def raw_fast() -> int:
        return sum(len(e.ids) + 1 for e in tok.encode_batch_fast(texts))

    def build() -> int:
        out = work / "mix"
        shutil.rmtree(out, ignore_errors=True)
        spec = {
            "tokenizer": str(tok_file),
            "target_tokens": expected,
            "seq_len": 2048,
            "workers": args.build_workers,
            "sources": [{"name": "docs", "path": str(work / "docs"), "weight": 1, "max_repetition": 1}],
        }
        return build_mixture(spec, out, progress=False).total_tokens

    def datatrove() -> int:
        from datatrove.executor import LocalPipelineExecutor
        from datatrove.pipeline.readers import ParquetReader
        from datatrove.pipeline.tokens import DocumentTokenizer

        out, logs = work / "dt", work / "dt-logs"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
        pipeline = [
            ParquetReader(str(work / "docs")),
            DocumentTokenizer(str(out), tokenizer_name_or_path=str(tok_file), eos_token=EOT),
        ]
        executor = LocalPipelineExecutor(
            pipeline, tasks=args.files, workers=args.workers, logging_dir=str(logs)
        )
        executor.run()
        return sum(p.stat().st_size for p in out.glob("*.ds")) // 2

    expected = raw()
    methods = {
        "raw encode_batch": raw,
        "raw encode_batch_fast": raw_fast,
        "mixture build": build,
        "datatrove": datatrove,
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.runs):
        for name, fn in methods.items():
            start = time.perf_counter()
            tokens = fn()
            times[name].append(time.perf_counter() - start)
            if tokens != expected:
                print(f"  warning: {name} produced {tokens:,} tokens, expected {expected:,}")
    results = {}
    for name, runs in times.items():
        seconds = statistics.median(runs)
        results[name] = expected / seconds
        spread = ", ".join(f"{t:.2f}" for t in runs)
        print(f"{name:<22} {seconds:7.2f} s  {results[name]:12,.0f} tokens/s   (runs: {spread} s)")
    return results


if __name__ == "__main__":
    main()
