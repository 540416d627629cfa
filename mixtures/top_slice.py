"""The top slice of a source by a score column: the high-quality part an anneal phase trains on.

An anneal (mid-training) mixture is the best documents of the main data plus a share of the main
mixture itself (OLMo 2's Dolmino mix, Llama 3's annealing on high-quality data). A source with
`top_fraction: f` keeps the documents whose `score_column` (default `quality_score`, written by the
quality classifier) is at least the score of its ceil(f x n)-th best document; ties at the cut are
kept. The threshold is computed over the whole source before any tokenization, so every task cuts
at the same score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def score_threshold(files: Sequence[Path], column: str, fraction: float) -> float:
    """The lowest score kept when keeping the top `fraction` of the documents of `files`."""
    scores = []
    for file in files:
        parquet = pq.ParquetFile(file)
        if column not in parquet.schema_arrow.names:
            raise KeyError(f"{file}: no `{column}` column to take the top slice by (run the quality classifier)")
        values = parquet.read(columns=[column]).column(0).to_numpy(zero_copy_only=False).astype(np.float64)
        scores.append(values[np.isfinite(values)])
    every = np.sort(np.concatenate(scores) if scores else np.zeros(0))[::-1]
    if every.size == 0:
        raise ValueError(f"no finite `{column}` values to take the top slice by")
    keep = max(1, math.ceil(fraction * every.size))
    return float(every[keep - 1])
