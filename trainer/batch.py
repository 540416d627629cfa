"""The global batch in tokens (seed 002: "~4M tokens/step") resolved to micro-batch x accumulation x ranks.

A recipe states the batch in tokens so it survives a change of sequence length or of cluster size;
the loop needs windows per rank per micro-batch. `--micro-batch` stays the memory bound: the largest
micro-batch not above it that divides the per-rank share is used, and accumulation makes up the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


class BatchError(ValueError):
    """A token budget that does not divide into whole windows per rank."""


@dataclass(frozen=True)
class BatchShape:
    micro_batch: int
    grad_accum: int

    def describe(self, seq_len: int, world_size: int) -> str:
        tokens = self.micro_batch * self.grad_accum * world_size * seq_len
        return (
            f"global batch {tokens} tokens = micro-batch {self.micro_batch} x accumulation {self.grad_accum} "
            f"x {world_size} ranks x seq_len {seq_len}"
        )


def resolve_batch(global_batch_tokens: int, seq_len: int, world_size: int, max_micro_batch: int) -> BatchShape:
    """micro_batch x grad_accum = global_batch_tokens / (seq_len x world_size), micro_batch <= max_micro_batch."""
    if global_batch_tokens < 1 or seq_len < 1 or world_size < 1 or max_micro_batch < 1:
        raise BatchError(
            f"batch sizes must be >= 1 (tokens {global_batch_tokens}, seq_len {seq_len}, "
            f"ranks {world_size}, micro-batch {max_micro_batch})"
        )
    per_step = seq_len * world_size
    if global_batch_tokens % per_step:
        raise BatchError(
            f"--global-batch-tokens {global_batch_tokens} is not a multiple of seq_len {seq_len} x "
            f"{world_size} ranks = {per_step}; nearest: {max(1, round(global_batch_tokens / per_step)) * per_step}"
        )
    per_rank = global_batch_tokens // per_step
    micro = max(d for d in range(1, min(per_rank, max_micro_batch) + 1) if per_rank % d == 0)
    return BatchShape(micro, per_rank // micro)
