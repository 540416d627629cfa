"""Tokenize one slice of a parquet file into a temporary token part (tokens + document lengths).

Runs on a worker thread or process: encodes batches (encoders.py picks the engine) and writes raw
tokens with the separators already in place, so the shuffle step only copies bytes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from mixtures.encoders import Encode, choose_encoder


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


def encode_task(task: EncodeTask) -> TokenPart:
    """Encode the task's rows; empty texts are skipped (counted), each document gets its separator(s)."""
    encode: Encode | None = None
    dtype = np.dtype(task.dtype).newbyteorder("<")
    columns = [task.column] + ([task.cluster_column] if task.cluster_column else [])
    parquet = pq.ParquetFile(task.file)
    if task.cluster_column and task.cluster_column not in parquet.schema_arrow.names:
        raise KeyError(f"{task.file}: no `{task.cluster_column}` column to re-hydrate by")
    lengths: list[np.ndarray] = []
    clusters: list[np.ndarray] = []
    skipped = total = 0
    with open(task.out_prefix + ".tok", "wb") as out:
        for batch in parquet.iter_batches(task.batch_docs, row_groups=task.row_groups, columns=columns):
            texts = batch.column(0).to_pylist()
            keep = [i for i, t in enumerate(texts) if t]
            skipped += len(texts) - len(keep)
            if not keep:
                continue
            docs = [texts[i] for i in keep]
            if encode is None:
                encode = choose_encoder(task.tokenizer_file, docs, allow_fast=task.fast)
            tokens, doc_lengths = _with_separators(encode(docs), dtype, task.bos_id, task.eos_id)
            tokens.tofile(out)
            lengths.append(doc_lengths)
            total += int(tokens.size)
            if task.cluster_column:
                sizes = batch.column(1).to_numpy(zero_copy_only=False)
                clusters.append(np.nan_to_num(sizes[keep].astype(np.float64), nan=1).astype(np.int64))
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
        skipped_empty=skipped,
    )


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
