"""Stream training text from parquet: a seeded sample to a character budget, long documents capped.

The HF BPE trainer keeps every distinct pre-token in memory, so it is fed a bounded, shuffled sample
rather than a whole crawl, and no single huge document can dominate it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tqdm import tqdm


@dataclass
class SampleStats:
    """What the sampler read and kept (filled in while iterating)."""

    documents_seen: int = 0
    documents_used: int = 0
    documents_truncated: int = 0
    chars_used: int = 0
    estimated_total_bytes: int = 0


def estimate_text_bytes(files: Sequence[Path], column: str = "text") -> int:
    """Uncompressed size of the text column, from parquet footers only (no data read)."""
    total = 0
    for path in files:
        meta = pq.ParquetFile(path).metadata
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            for c in range(group.num_columns):
                chunk = group.column(c)
                if chunk.path_in_schema == column:
                    total += chunk.total_uncompressed_size
    return total


def sample_texts(
    files: Sequence[Path],
    char_budget: int,
    doc_char_cap: int,
    seed: int = 0,
    column: str = "text",
    batch_rows: int = 1024,
    progress: bool = True,
    stats: SampleStats | None = None,
) -> Iterator[list[str]]:
    """Yield batches of document texts until `char_budget` characters are out.

    Files are visited in a seeded random order and each document is kept with probability
    remaining budget / expected remaining (capped) characters, re-estimated after every batch, so a
    budget smaller than the corpus samples all of it rather than its first files. Each kept document
    is cut to `doc_char_cap` characters.
    """
    stats = stats if stats is not None else SampleStats()
    rng = np.random.default_rng(seed)
    stats.estimated_total_bytes = estimate_text_bytes(files, column)
    total_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    keep = _keep_probability(char_budget, stats.estimated_total_bytes)
    capped_seen = 0
    bar = tqdm(
        total=min(char_budget, stats.estimated_total_bytes),
        unit="char",
        unit_scale=True,
        desc="sampling text",
        disable=not progress,
    )
    try:
        for file_idx in rng.permutation(len(files)):
            parquet = pq.ParquetFile(files[file_idx])
            for batch in parquet.iter_batches(columns=[column], batch_size=batch_rows):
                texts = batch.column(0).to_pylist()
                stats.documents_seen += len(texts)
                capped_seen += sum(min(len(t), doc_char_cap) for t in texts if t)
                chosen = np.flatnonzero(rng.random(len(texts)) < keep)
                out = _cap_and_count(texts, chosen, doc_char_cap, char_budget, stats)
                if out:
                    bar.update(sum(map(len, out)))
                    yield out
                if stats.chars_used >= char_budget:
                    return
                remaining_rows = total_rows - stats.documents_seen
                expected = remaining_rows * capped_seen / max(1, stats.documents_seen)
                keep = _keep_probability(char_budget - stats.chars_used, expected)
    finally:
        bar.close()


def _keep_probability(budget_left: int, expected_chars: float) -> float:
    """Slightly oversample (10 %) so the budget is met rather than missed by sampling noise."""
    return min(1.0, 1.1 * budget_left / max(1.0, expected_chars))


def _cap_and_count(
    texts: list[str | None], chosen: np.ndarray, cap: int, budget: int, stats: SampleStats
) -> list[str]:
    out: list[str] = []
    for i in chosen:
        text = texts[i]
        if not text:
            continue
        if len(text) > cap:
            text = text[:cap]
            stats.documents_truncated += 1
        text = text[: budget - stats.chars_used]
        out.append(text)
        stats.documents_used += 1
        stats.chars_used += len(text)
        if stats.chars_used >= budget:
            break
    return out
