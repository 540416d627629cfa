"""Connected components of the duplicate graph with vectorised union-find.

Memory is O(edges): only documents that appear in a candidate pair are ever materialised.
Each round hooks every root onto the smallest root it is linked to, then compresses paths by
pointer jumping, so labels only decrease and every component ends rooted at its smallest node.
"""

from __future__ import annotations

import numpy as np


def connected_components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, roots): the distinct nodes of the edges, sorted, and each one's component root
    (its smallest node)."""
    nodes, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    u, v = inverse[: len(a)], inverse[len(a) :]
    parent = np.arange(len(nodes), dtype=np.int64)
    while True:
        pu, pv = parent[u], parent[v]
        differ = pu != pv
        if not differ.any():
            break
        u, v = u[differ], v[differ]  # edges inside one component never matter again
        lo, hi = np.minimum(pu[differ], pv[differ]), np.maximum(pu[differ], pv[differ])
        np.minimum.at(parent, hi, lo)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
    return nodes, nodes[parent]
