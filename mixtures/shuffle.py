"""Stage 3 of a build: one table of all document copies, shuffled across sources, cut into files."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mixtures.encode import TokenPart
from mixtures.rehydrate import rehydration_weights


@dataclass(frozen=True)
class Docs:
    """Documents (or copies): which part each is in, its first token there, its length, its weight."""

    part: np.ndarray
    start: np.ndarray
    length: np.ndarray
    weight: np.ndarray  # re-hydration repetitions; 1 without

    @property
    def tokens(self) -> int:
        return int(self.length.sum())


def source_docs(parts: list[TokenPart], source: int, rehydrate: dict[int, int] | None) -> Docs:
    """Every document of one source; part ids index `parts`."""
    ids, starts, lengths, weights = [], [], [], []
    for pid, part in enumerate(parts):
        if part.source != source:
            continue
        length = np.load(part.lengths_path).astype(np.int64)
        ids.append(np.full(length.size, pid, dtype=np.int32))
        starts.append(np.cumsum(length) - length)
        lengths.append(length)
        if rehydrate and part.cluster_path:
            weights.append(rehydration_weights(np.load(part.cluster_path), rehydrate))
        else:
            weights.append(np.ones(length.size, dtype=np.int64))
    if not ids:
        return Docs(np.zeros(0, np.int32), *(np.zeros(0, np.int64) for _ in range(3)))
    return Docs(*(np.concatenate(a) for a in (ids, starts, lengths, weights)))


def shuffled_copies(docs: list[Docs], copies: list[np.ndarray], rng: np.random.Generator) -> Docs:
    """Repeat each document by its copy count, then one permutation over all sources together."""
    pairs = list(zip(docs, copies, strict=True))
    part, start, length = (
        np.concatenate([np.repeat(getattr(d, field), c) for d, c in pairs])
        for field in ("part", "start", "length")
    )
    order = rng.permutation(part.size)
    return Docs(part[order], start[order], length[order], np.ones(part.size, dtype=np.int64))


def file_cuts(lengths: np.ndarray, tokens_per_file: int) -> list[tuple[int, int]]:
    """[start, end) document ranges of about equal tokens, each at most ~tokens_per_file (whole docs)."""
    total = int(lengths.sum())
    n_files = max(1, math.ceil(total / tokens_per_file))
    cum = np.cumsum(lengths)
    inner = np.searchsorted(cum, [total * k / n_files for k in range(1, n_files)], side="right").tolist()
    cuts = [0, *inner, int(lengths.size)]
    ranges = [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
    return ranges or [(0, 0)]
