"""Exactly one epoch over token shards: fixed windows, one seeded permutation, disjoint rank slices.

Each .ds file is cut into non-overlapping windows of seq_len + 1 tokens (the same windows as
datatrove's DatatroveFolderDataset, files in manifest order). One global permutation orders all
windows; optimizer step s consumes permutation[s*G:(s+1)*G] where G is the global batch in windows,
and inside it micro-batch m of rank r takes the B windows at offset (m*W + r)*B. The whole state is
one integer, the number of windows consumed, so resuming is exact on any machine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mixtures.reader import ShardReader

log = logging.getLogger(__name__)


class WindowIndex:
    """Global window id -> tokens, over the files of one shard directory (optionally a subset)."""

    def __init__(self, reader: ShardReader, seq_len: int, files: list[int] | None = None) -> None:
        self.reader, self.window = reader, seq_len + 1
        self.files = list(range(len(reader))) if files is None else files
        counts = [reader.num_windows(f, self.window) for f in self.files]
        self.starts = np.cumsum([0, *counts])
        self.tail_tokens = sum(reader.manifest.files[f].tokens for f in self.files) - self.num_windows * self.window

    @property
    def num_windows(self) -> int:
        return int(self.starts[-1])

    def locate(self, window_id: int) -> tuple[int, int, int]:
        """(file, first token, length) of one window."""
        k = int(np.searchsorted(self.starts, window_id, side="right")) - 1
        offset = (window_id - int(self.starts[k])) * self.window
        return self.files[k], offset, self.window

    def tokens(self, window_id: int) -> np.ndarray:
        """The seq_len + 1 tokens of one window."""
        return self.reader.window(*self.locate(window_id))

    def prefetch(self, window_ids: np.ndarray) -> None:
        """Start reading these windows ahead (on a store: while the current step trains)."""
        self.reader.prefetch([self.locate(int(w)) for w in window_ids])

    def batch(self, window_ids: np.ndarray) -> torch.Tensor:
        """(len(ids), seq_len + 1) int64 tensor (its windows read together: one round of range reads on a store)."""
        rows = np.stack(self.reader.windows([self.locate(int(w)) for w in window_ids])).astype(np.int64)
        return torch.from_numpy(rows)


@dataclass(frozen=True)
class EpochPlan:
    """How one epoch divides into optimizer steps; what does not fill a global batch is dropped."""

    num_windows: int
    micro_batch: int
    grad_accum: int
    world_size: int
    seq_len: int

    @property
    def global_batch(self) -> int:
        """Windows per optimizer step."""
        return self.micro_batch * self.grad_accum * self.world_size

    @property
    def steps(self) -> int:
        return self.num_windows // self.global_batch

    @property
    def dropped_windows(self) -> int:
        return self.num_windows - self.steps * self.global_batch

    @property
    def tokens_per_step(self) -> int:
        """Trained (input) tokens per optimizer step."""
        return self.global_batch * self.seq_len

    def describe(self, tail_tokens: int) -> str:
        return (
            f"epoch: {self.num_windows} windows of {self.seq_len + 1} tokens, "
            f"global batch {self.global_batch} ({self.micro_batch} x {self.grad_accum} accum "
            f"x {self.world_size} ranks) -> {self.steps} steps; "
            f"dropped {self.dropped_windows} windows that do not fill a batch "
            f"and {tail_tokens} file-tail tokens shorter than a window"
        )


class EpochLoader:
    """Yields this rank's micro-batches for each remaining optimizer step of the epoch."""

    def __init__(self, index: WindowIndex, plan: EpochPlan, rank: int, seed: int) -> None:
        if plan.steps == 0:
            raise ValueError(
                f"{plan.num_windows} windows cannot fill one global batch of {plan.global_batch}; "
                "lower the batch or add tokens"
            )
        self.index, self.plan, self.rank, self.seed = index, plan, rank, seed
        self.order = np.random.default_rng(seed).permutation(plan.num_windows)
        self.consumed = 0
        self.last_step = plan.steps  # the run's last step (--max-steps): no step after it is read ahead
        log.info(plan.describe(index.tail_tokens))

    @property
    def step(self) -> int:
        """Optimizer steps already consumed."""
        return self.consumed // self.plan.global_batch

    def window_ids(self, step: int, micro: int) -> np.ndarray:
        """Permutation slots of micro-batch `micro` of this rank at optimizer step `step`."""
        p = self.plan
        start = step * p.global_batch + (micro * p.world_size + self.rank) * p.micro_batch
        return self.order[start : start + p.micro_batch]

    def __iter__(self) -> Iterator[list[tuple[np.ndarray, torch.Tensor]]]:
        """Per step: grad_accum (window ids, (B, seq_len + 1) tokens) pairs; advances `consumed`."""
        while self.step < self.plan.steps:
            step = self.step
            micro = []
            for m in range(self.plan.grad_accum):
                ids = self.window_ids(step, m)
                micro.append((ids, self.index.batch(ids)))
            if step + 1 < min(self.plan.steps, self.last_step):  # the next step's windows, read while this one trains
                self.index.prefetch(np.concatenate([self.window_ids(step + 1, m) for m in range(self.plan.grad_accum)]))
            self.consumed += self.plan.global_batch
            yield micro

    def state_dict(self) -> dict[str, Any]:
        return {
            "consumed_samples": self.consumed,
            "seed": self.seed,
            "global_batch": self.plan.global_batch,
            "num_windows": self.plan.num_windows,
            "seq_len": self.plan.seq_len,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: same data and batch or refuse (another order would repeat or skip windows)."""
        for key in ("seed", "global_batch", "num_windows", "seq_len"):
            mine = self.state_dict()[key]
            if int(state[key]) != mine:
                raise ValueError(f"cannot resume: checkpoint has {key}={state[key]}, this run has {mine}")
        self.consumed = int(state["consumed_samples"])


def validation_batches(
    index: WindowIndex, micro_batch: int, max_batches: int, rank: int, world_size: int
) -> list[torch.Tensor]:
    """The first windows of a held-out set, in order, split evenly across ranks (same count per rank)."""
    per_rank = min(max_batches, index.num_windows // (micro_batch * world_size))
    batches = []
    for b in range(per_rank):
        start = (b * world_size + rank) * micro_batch
        batches.append(index.batch(np.arange(start, start + micro_batch)))
    return batches
