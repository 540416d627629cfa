"""Tokenize one slice of a parquet file into a temporary token part (tokens + document lengths).

Runs on a worker thread or process: encodes batches (encoders.py picks the engine) and writes raw
tokens with the separators already in place, so the shuffle step only copies bytes. With HF tokenizers'
own threads off (pool.tokenizers_threads_off), `encode_threads` batches are encoded at once, in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from mixtures.encoders import choose_encoder, engine_of
from mixtures.pool import ordered_map, tokenizers_threads_are_off

Batch = tuple[list[str], np.ndarray | None]  # non-empty texts, their cluster sizes


@dataclass(frozen=True)
class EncodeTask:
    """Rows `row_groups` of one parquet file -> `out_prefix`.tok / .len.npy (/ .cluster.npy)."""

    source: int
    file: str
    row_groups: tuple[int, ...]
    column: str
    cluster_column: str | None
    out_prefix: str
    tokenizer_file: str
    dtype: str
    bos_id: int | None
    eos_id: int | None
    fast: bool = True
    batch_docs: int = 1024
    encode_threads: int = 1  # >1 only while HF tokenizers' own threads are off (parts.py)
    score_column: str | None = None  # with min_score: keep rows scoring >= min_score (top_slice.py)
    min_score: float | None = None
    max_chars: int | None = None  # longer texts are skipped before tokenization (counted): spec `max_doc_chars`


@dataclass(frozen=True)
class TokenPart:
    """A contiguous token file and the lengths of the documents in it, in order."""

    source: int
    tokens_path: str
    lengths_path: str
    cluster_path: str | None
    documents: int
    tokens: int
    skipped_empty: int = 0
    skipped_too_long: int = 0


def encode_task(task: EncodeTask) -> TokenPart:
    """Encode the task's rows; empty texts are skipped (counted), each document gets its separator(s)."""
    dtype = np.dtype(task.dtype).newbyteorder("<")
    parquet = pq.ParquetFile(task.file)
    if task.cluster_column and task.cluster_column not in parquet.schema_arrow.names:
        raise KeyError(f"{task.file}: no `{task.cluster_column}` column to re-hydrate by")
    lengths: list[np.ndarray] = []
    clusters: list[np.ndarray] = []
    skipped = [0, 0]  # empty, too long
    total = 0
    batches = _batches(parquet, task, skipped)
    first = next(batches, None)
    with open(task.out_prefix + ".tok", "wb") as out:
        if first is not None:
            encode = choose_encoder(task.tokenizer_file, first[0], allow_fast=task.fast)
            # tiktoken fans out over threads itself; HF gets them here when its own pool is off
            hf_serial = engine_of(encode) == "tokenizers" and tokenizers_threads_are_off()
            threads = task.encode_threads if hf_serial else 1

            def work(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
                tokens, doc_lengths = _with_separators(encode(batch[0]), dtype, task.bos_id, task.eos_id)
                return tokens, doc_lengths, batch[1]

            for tokens, doc_lengths, sizes in ordered_map(work, itertools.chain([first], batches), threads):
                tokens.tofile(out)
                lengths.append(doc_lengths)
                total += int(tokens.size)
                if sizes is not None:
                    clusters.append(sizes)
    lengths_arr = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    np.save(task.out_prefix + ".len.npy", lengths_arr)
    cluster_path = None
    if task.cluster_column:
        cluster_path = task.out_prefix + ".cluster.npy"
        np.save(cluster_path, np.concatenate(clusters) if clusters else np.zeros(0, np.int64))
    return TokenPart(
        source=task.source,
        tokens_path=task.out_prefix + ".tok",
        lengths_path=task.out_prefix + ".len.npy",
        cluster_path=cluster_path,
        documents=int(lengths_arr.size),
        tokens=total,
        skipped_empty=skipped[0],
        skipped_too_long=skipped[1],
    )


def _batches(parquet: pq.ParquetFile, task: EncodeTask, skipped: list[int]) -> Iterator[Batch]:
    """The task's non-empty texts, `batch_docs` rows at a time; empty ones and those over `max_chars` are
    counted in `skipped` ([empty, too long]) and not tokenized."""
    columns = [task.column] + ([task.cluster_column] if task.cluster_column else [])
    columns += [task.score_column] if task.min_score is not None and task.score_column else []
    for batch in parquet.iter_batches(task.batch_docs, row_groups=task.row_groups, columns=columns):
        texts = batch.column(0).to_pylist()
        keep = [i for i, t in enumerate(texts) if t]
        skipped[0] += len(texts) - len(keep)
        if task.max_chars is not None:
            short = [i for i in keep if len(texts[i]) <= task.max_chars]
            skipped[1] += len(keep) - len(short)
            keep = short
        if task.min_score is not None:
            scores = batch.column(columns.index(str(task.score_column))).to_pylist()
            keep = [i for i in keep if scores[i] is not None and scores[i] >= task.min_score]
        if not keep:
            continue
        sizes = None
        if task.cluster_column:
            raw = batch.column(1).to_numpy(zero_copy_only=False)[keep]
            sizes = np.nan_to_num(raw.astype(np.float64), nan=1).astype(np.int64)
        yield [texts[i] for i in keep], sizes


def _with_separators(
    ids: list[list[int]], dtype: np.dtype, bos_id: int | None, eos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Flatten documents into one token array with BOS/EOS around each; return it and the lengths."""
    raw = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    extra = int(bos_id is not None) + int(eos_id is not None)
    lengths = raw + extra
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(raw.sum()))
    if not extra:
        return flat, lengths
    out = np.empty(int(lengths.sum()), dtype=dtype)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    body = np.ones(out.size, dtype=bool)
    if bos_id is not None:
        out[starts] = bos_id
        body[starts] = False
    if eos_id is not None:
        out[ends - 1] = eos_id
        body[ends - 1] = False
    out[body] = flat
    return out, lengths
