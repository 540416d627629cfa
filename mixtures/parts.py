"""Stage 1 of a build: every source as token parts (parquet tokenized in parallel, shards as they are)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq

from mixtures.encode import EncodeTask, TokenPart, encode_task
from mixtures.manifest import TokenizerInfo
from mixtures.pool import available_cores, run_tasks, tokenizers_threads_off
from mixtures.sources import ResolvedSource, check_shard_tokenizer, shard_part
from mixtures.top_slice import score_threshold

ROWS_PER_TASK = 50_000


def tokenize_sources(
    sources: list[ResolvedSource],
    tok_file: Path,
    info: TokenizerInfo,
    append_eos: bool,
    dtype: str,
    tmp: Path,
    workers: int,
    progress: bool = True,
    fast: bool = True,
    max_chars: int | None = None,
) -> list[TokenPart]:
    """Token parts of all sources, grouped by source index (parts of one source stay in file order)."""
    token_size = 4 if dtype == "uint32" else 2
    tasks: list[EncodeTask] = []
    parts: list[TokenPart] = []
    for idx, source in enumerate(sources):
        if source.kind == "shards":
            if source.spec.top_fraction is not None:
                raise ValueError(f"source {source.spec.name}: top_fraction needs documents (parquet), not shards")
            check_shard_tokenizer(source, info.sha256, token_size)
            for j, ds in enumerate(source.files):
                parts.append(shard_part(ds, idx, token_size, tmp / f"s{idx}-shard{j}.len.npy"))
            continue
        cluster = source.spec.cluster_column if source.spec.rehydrate else None
        min_score = None
        if source.spec.top_fraction is not None:
            min_score = score_threshold(source.files, source.spec.score_column, source.spec.top_fraction)
        for j, file in enumerate(source.files):
            for k, groups in enumerate(row_group_spans(file)):
                tasks.append(
                    EncodeTask(
                        source=idx,
                        file=str(file),
                        row_groups=groups,
                        column=source.spec.column,
                        cluster_column=cluster,
                        out_prefix=str(tmp / f"s{idx}-f{j}-r{k}"),
                        tokenizer_file=str(tok_file),
                        dtype=dtype,
                        bos_id=info.bos_id,
                        eos_id=info.eos_id if append_eos else None,
                        fast=fast,
                        score_column=source.spec.score_column,
                        min_score=min_score,
                        max_chars=max_chars,
                    )
                )
    if workers > 1:  # processes: each sets its own Rust thread count (pool.py)
        parts.extend(run_tasks(encode_task, tasks, workers, desc="tokenizing", progress=progress))
    else:
        with tokenizers_threads_off() as off:
            # one core per batch in flight: tasks run on min(tasks, cores) threads, each encodes
            # cores / threads batches at once, so a single large file still uses every core
            inner = max(1, available_cores() // max(1, min(len(tasks), available_cores()))) if off else 1
            tasks = [dataclasses.replace(t, encode_threads=inner) for t in tasks]
            parts.extend(run_tasks(encode_task, tasks, workers, desc="tokenizing", progress=progress))
    return sorted(parts, key=lambda p: p.source)


def row_group_spans(file: Path, rows_per_task: int = ROWS_PER_TASK) -> list[tuple[int, ...]]:
    """Split a parquet file into runs of whole row groups of about `rows_per_task` rows (one task each)."""
    meta = pq.ParquetFile(file).metadata
    spans: list[tuple[int, ...]] = []
    current: list[int] = []
    rows = 0
    for rg in range(meta.num_row_groups):
        current.append(rg)
        rows += meta.row_group(rg).num_rows
        if rows >= rows_per_task:
            spans.append(tuple(current))
            current, rows = [], 0
    if current:
        spans.append(tuple(current))
    return spans
