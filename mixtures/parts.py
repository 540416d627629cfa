"""Stage 1 of a build: every source as token parts (parquet tokenized in parallel, shards as they are)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from mixtures.encode import EncodeTask, TokenPart, encode_task
from mixtures.manifest import TokenizerInfo
from mixtures.pool import available_cores, on_threads_here, run_tasks, tokenizers_threads_off
from mixtures.sources import ResolvedSource, check_arrived, check_shard_tokenizer, shard_part
from mixtures.top_slice import score_threshold

ROWS_PER_TASK = 50_000


@dataclass(frozen=True)
class ArrivingFile:
    """A parquet file still being copied in (``sources.Arriving``): its turn waits for it, checks it and splits
    it into the tasks the file would have been split into before the build (``row_group_spans``), one after
    another: its parts are those tasks' parts, in their order, so the shards are the same byte for byte."""

    template: EncodeTask  # the file's tasks but for `row_groups`, and `out_prefix` without the span's "-r<k>"
    source: ResolvedSource
    wait: Callable[[Path], None]


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
    """Token parts of all sources, grouped by source index (parts of one source stay in file order). A source
    whose files are still arriving is tokenized file by file as each arrives, when the tasks run on this
    process's threads; otherwise its files are waited for first."""
    token_size = 4 if dtype == "uint32" else 2
    tasks: list[EncodeTask | ArrivingFile] = []
    parts: list[TokenPart] = []
    for idx, source in enumerate(sources):
        if source.kind == "shards":
            if source.spec.top_fraction is not None:
                raise ValueError(f"source {source.spec.name}: top_fraction needs documents (parquet), not shards")
            check_shard_tokenizer(source, info.sha256, token_size)
            for j, ds in enumerate(source.files):
                parts.append(shard_part(ds, idx, token_size, tmp / f"s{idx}-shard{j}.len.npy"))
            continue
        arriving = source.arriving
        if arriving is not None and (source.spec.top_fraction is not None or not on_threads_here(workers)):
            arriving.wait_all()  # the score threshold reads every file; other runners cannot wait here
            check_arrived(source, source.files)
            arriving = None
        cluster = source.spec.cluster_column if source.spec.rehydrate else None
        min_score = None
        if source.spec.top_fraction is not None:
            min_score = score_threshold(source.files, source.spec.score_column, source.spec.top_fraction)
        for j, file in enumerate(source.files):
            template = EncodeTask(
                source=idx,
                file=str(file),
                row_groups=(),
                column=source.spec.column,
                cluster_column=cluster,
                out_prefix=str(tmp / f"s{idx}-f{j}"),
                tokenizer_file=str(tok_file),
                dtype=dtype,
                bos_id=info.bos_id,
                eos_id=info.eos_id if append_eos else None,
                fast=fast,
                score_column=source.spec.score_column,
                min_score=min_score,
                max_chars=max_chars,
            )
            if arriving is not None:
                tasks.append(ArrivingFile(template, source, arriving.wait))
            else:
                tasks.extend(file_tasks(template))
    # processes set their own Rust thread count (pool.py); this process's threads encode with HF tokenizers'
    # threads off, one core per batch in flight: tasks run on min(tasks, cores) threads, each encodes
    # cores / threads batches at once, so a single large file still uses every core
    with tokenizers_threads_off() if workers <= 1 else contextlib.nullcontext(False) as off:
        if off:
            inner = max(1, available_cores() // max(1, min(len(tasks), available_cores())))
            tasks = [_with_threads(t, inner) for t in tasks]
        for group in run_tasks(_tokenize, tasks, workers, desc="tokenizing", progress=progress):
            parts.extend(group)
    return sorted(parts, key=lambda p: p.source)


def file_tasks(template: EncodeTask) -> list[EncodeTask]:
    """`template`'s file as tasks of about ``ROWS_PER_TASK`` rows, out prefixes "<template's>-r<k>"."""
    return [
        dataclasses.replace(template, row_groups=groups, out_prefix=f"{template.out_prefix}-r{k}")
        for k, groups in enumerate(row_group_spans(Path(template.file)))
    ]


def _with_threads(task: EncodeTask | ArrivingFile, threads: int) -> EncodeTask | ArrivingFile:
    if isinstance(task, ArrivingFile):
        return dataclasses.replace(task, template=dataclasses.replace(task.template, encode_threads=threads))
    return dataclasses.replace(task, encode_threads=threads)


def _tokenize(task: EncodeTask | ArrivingFile) -> list[TokenPart]:
    """A task's part; an arriving file's parts once it is there and passes the check it would have passed
    before the build (one path for both, so a build's parts do not depend on whether its files had landed)."""
    if isinstance(task, EncodeTask):
        return [encode_task(task)]
    file = Path(task.template.file)
    task.wait(file)
    check_arrived(task.source, (file,))
    return [encode_task(t) for t in file_tasks(task.template)]


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
