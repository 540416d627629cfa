"""FineWeb-2 re-hydration: repeat a kept document by the size of the duplicate cluster it stood for.

Dedup keeps one document per cluster and records `minhash_cluster_size`; documents with a middling
number of duplicates tend to be better than unique ones or boilerplate copied thousands of times,
so the table maps cluster-size thresholds to repetition counts, as a step function:
{1: 1, 2: 3, 5: 6, 100: 1} means size 1 -> 1, 2-4 -> 3, 5-99 -> 6, 100 and up -> 1.
"""

from __future__ import annotations

import numpy as np


def rehydration_weights(cluster_sizes: np.ndarray, table: dict[int, int]) -> np.ndarray:
    """Repetitions per document; sizes below the smallest threshold (or missing, <= 0) count as 1."""
    thresholds = np.array(sorted(table), dtype=np.int64)
    counts = np.array([table[t] for t in sorted(table)], dtype=np.int64)
    sizes = np.asarray(cluster_sizes, dtype=np.int64)
    slot = np.searchsorted(thresholds, sizes, side="right") - 1
    return np.where(slot >= 0, counts[np.clip(slot, 0, None)], 1)
