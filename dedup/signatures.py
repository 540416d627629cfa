"""Stage 1: stream documents, write one key file per band per task (datatrove PipelineStep).

Memory is one batch of documents and its shingles; keys go straight to disk in document order,
so peak RSS does not depend on how many documents a task reads. Files are committed atomically at
the end of the task; if they already exist and are valid for this config, the task is skipped.
"""

from __future__ import annotations

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.batching import batched
from datatrove.utils.logging import logger

from dedup.config import DedupConfig
from dedup.formats import SIG_KIND, SIGNATURE, signature_path
from dedup.keys import make_keyer, n_bands
from dedup.records import Header, RecordWriter, commit_all, is_valid


class DedupSignatures(PipelineStep):
    """Band keys of every document of this task: ``<output>/band_XX/<rank>.sig``."""

    type = "🫂 - DEDUP"
    name = "🎯 signatures"

    def __init__(
        self,
        output_folder: DataFolderLike,
        config: DedupConfig | None = None,
        kind: str = "minhash",
    ) -> None:
        super().__init__()
        self.output_folder = get_datafolder(output_folder)
        self.config = config or DedupConfig()
        self.kind = kind
        self.n_bands = n_bands(self.config, kind)
        self.fingerprint = self.config.fingerprint(kind)

    def _done(self, rank: int, world_size: int) -> bool:
        return all(
            is_valid(
                self.output_folder,
                signature_path(b, rank),
                SIG_KIND,
                self.fingerprint,
                SIGNATURE,
                rank=rank,
                world_size=world_size,
            )
            for b in range(self.n_bands)
        )

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> None:
        """Consume the documents (like datatrove's MinhashDedupSignature, nothing is yielded)."""
        if self._done(rank, world_size):
            logger.info(f"signatures of rank {rank} already complete, skipping")
            return
        keyer = make_keyer(self.config, self.kind)
        header = Header(SIG_KIND, self.fingerprint, rank, world_size, SIGNATURE.itemsize)
        folder = self.output_folder
        writers = [RecordWriter(folder, signature_path(b, rank), header) for b in range(self.n_bands)]
        n_docs = 0
        try:
            for batch in batched(data, self.config.batch_docs):
                with self.track_time("batch"):
                    keys, positions = keyer(batch)
                    records = np.empty(len(positions), dtype=SIGNATURE)
                    records["doc"] = positions + n_docs
                    for b, writer in enumerate(writers):
                        records["key"] = keys[:, b]
                        writer.write(records)
                n_docs += len(batch)
                self.stat_update("documents", value=len(batch))
                self.stat_update("without_shingles", value=len(batch) - len(positions))
        except BaseException:
            for writer in writers:
                writer.abort()
            raise
        if n_docs >= 1 << 32:
            raise ValueError(f"rank {rank} read {n_docs} documents; at most 2^32 per task are supported")
        commit_all(writers, extra=n_docs)
