"""Candidate pairs from a key-sorted stream: every document is linked to the first one with its key.

A group of g documents sharing a band key yields g - 1 "star" edges instead of g(g-1)/2 pairs;
connectivity, which is all clustering needs, is the same. Groups may span blocks of the stream.
"""

from __future__ import annotations

import numpy as np

PAIR = np.dtype([("a", "<u8"), ("b", "<u8")])
PAIR_KIND = b"PAIR"


class StarEdges:
    """Turns consecutive sorted (key, node) blocks into (head, member) edges. ``distinct_keys``: also keep each
    block's first occurrences of its keys in ``keys`` (the stream's distinct keys, sorted: a band's index)."""

    def __init__(self, distinct_keys: bool = False) -> None:
        self._last_key: int | None = None
        self._head = 0
        self.keys: list[np.ndarray] | None = [] if distinct_keys else None

    def feed(self, block: np.ndarray) -> np.ndarray:
        keys, nodes = block["key"], block["node"]
        n = len(keys)
        if n == 0:
            return np.empty(0, dtype=PAIR)
        starts = np.empty(n, dtype=bool)
        starts[0] = self._last_key is None or int(keys[0]) != self._last_key
        np.not_equal(keys[1:], keys[:-1], out=starts[1:])
        if self.keys is not None:
            self.keys.append(keys[starts])
        idx = np.where(starts, np.arange(n), -1)
        np.maximum.accumulate(idx, out=idx)
        heads = np.where(idx >= 0, nodes[np.maximum(idx, 0)], np.uint64(self._head))
        members = ~starts
        edges = np.empty(int(members.sum()), dtype=PAIR)
        edges["a"] = heads[members]
        edges["b"] = nodes[members]
        self._last_key = int(keys[-1])
        self._head = int(heads[-1])
        return edges
