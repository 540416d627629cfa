"""URL dedup: one capture per normalised URL, the newest (datatrove's ``UrlDedupSignature`` /
``UrlFindDedups`` / ``UrlDedupFilter`` with the crawl date as ``document_priority``).

Why: a crawl refetches pages, and a dump holds several captures of one URL; the newest is the page
as it is now. The pass reuses the dedup machinery: the keyer writes two "bands" per document
(band 0: the URL key, band 1: the capture time), and ``UrlClusters`` groups documents by URL key
in memory (16 bytes per document of the run) instead of LSH buckets. Ties in time keep the first
document in input order, as every other dedup pass does.
"""

from __future__ import annotations

import numpy as np

from dedup.clusters import CLUSTER_TABLE, DedupClusters
from dedup.formats import SIG_KIND, SIGNATURE, node_ids, signature_path
from dedup.records import open_records
from dedup.urlnorm import URL_BANDS


class UrlClusters(DedupClusters):
    """Per URL key, keep the newest capture (then the first in input order); the rest are removed."""

    name = "🎯 URL clusters"

    def clustered_nodes(self) -> np.ndarray:
        keys, times, nodes = [], [], []
        for rank in range(len(self._docs_per_rank())):
            u, t = (
                open_records(
                    self.signatures_folder, signature_path(b, rank), SIG_KIND, self.fingerprint, SIGNATURE
                ).read_all()
                for b in range(URL_BANDS)
            )
            keys.append(u["key"])
            times.append(t["key"])
            nodes.append(node_ids(rank, u["doc"]))
        key, time, node = (np.concatenate(x) if x else np.empty(0, np.uint64) for x in (keys, times, nodes))
        order = np.lexsort((node, ~time, key))  # by key, newest first, then input order
        key, node = key[order], node[order]
        starts = np.r_[True, key[1:] != key[:-1]] if len(key) else np.empty(0, bool)
        group = np.cumsum(starts) - 1
        sizes = np.bincount(group) if len(group) else np.empty(0, np.int64)
        in_cluster = sizes[group] > 1
        table = np.empty(int(in_cluster.sum()), dtype=CLUSTER_TABLE)
        table["node"] = node[in_cluster]
        table["size"] = sizes[group][in_cluster]
        table["keep"] = starts[in_cluster]
        # clusters numbered in the order of their kept documents, as the MinHash pass numbers them
        kept_nodes = node[starts & in_cluster]
        rank_of_group = np.empty(len(sizes), np.int64)
        rank_of_group[group[starts & in_cluster]] = np.argsort(np.argsort(kept_nodes))
        table["cluster"] = rank_of_group[group[in_cluster]]
        table.sort(order="node")
        return table
