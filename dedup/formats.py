"""Record types and file names shared by the dedup stages.

A document is a node ``rank << 32 | index``: the task that read it and its position among the
documents that task read. Sorting nodes therefore sorts documents in input order.
"""

from __future__ import annotations

import numpy as np

SIG_KIND = b"SIGS"
SIGNATURE = np.dtype([("key", "<u8"), ("doc", "<u4")])

CLUSTER_KIND = b"CLUS"
CLUSTER = np.dtype([("doc", "<u4"), ("size", "<u4"), ("cluster", "<i8"), ("keep", "u1")])


def signature_path(band: int, rank: int) -> str:
    return f"band_{band:02d}/{rank:05d}.sig"


def pairs_path(band: int) -> str:
    return f"band_{band:02d}.pairs"


def runs_dir(band: int) -> str:
    return f"band_{band:02d}.runs"


def clusters_path(rank: int) -> str:
    return f"{rank:05d}.clusters"


def node_ids(rank: int, docs: np.ndarray) -> np.ndarray:
    return (np.uint64(rank) << np.uint64(32)) | docs.astype(np.uint64)


def node_rank(nodes: np.ndarray) -> np.ndarray:
    return (nodes >> np.uint64(32)).astype(np.int64)


def node_doc(nodes: np.ndarray) -> np.ndarray:
    return (nodes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
