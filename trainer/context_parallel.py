"""Context parallel: each `cp` rank holds a slice of every sequence; attention runs as a ring (CUDA only).

torch's `context_parallel` (torch.distributed.tensor.experimental) patches SDPA with ring attention
over the `cp` mesh and shards the given buffers in place along their sequence dimension, head-tail
load-balanced for the causal mask. As in torchtitan, the buffers are the step's input and label ids
and the RoPE tables (so each rank rotates its tokens by their global positions), SDPA is limited to
the flash / memory-efficient / cuDNN kernels the ring implements, and FSDP shards over
dp_shard x cp (`trainer.mesh.fsdp_mesh`): every cp rank holds a different slice of the same batch,
so averaging the gradients over dp_shard x cp gives the global mean. The model stays unaware.

Refused in one line (`check_supported`): document masking (the ring takes no attention mask),
grouped-query attention (the ring's kernels take no `enable_gqa`), and CP under PP (not wired).
Held-out evaluation runs outside the context: each cp rank scores whole windows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.attention import SDPBackend, sdpa_kernel

from trainer.config import ModelConfig

_RING_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]


def check_supported(cp: int, model_cfg: ModelConfig, *, pp: int, document_masking: bool) -> None:
    """Refuse, in one line, what the ring attention cannot compute exactly."""
    if cp <= 1:
        return
    if document_masking:
        raise ValueError(
            f"--document-masking with --cp {cp} is unsupported: torch's ring attention takes no attention mask"
        )
    if model_cfg.n_kv_heads != model_cfg.n_heads:
        raise ValueError(
            f"--cp {cp} needs n_kv_heads == n_heads (got {model_cfg.n_kv_heads} vs {model_cfg.n_heads}): "
            "the ring attention kernels take no enable_gqa"
        )
    if pp > 1:
        raise ValueError(f"--cp {cp} with --pp {pp} is not wired: use context parallel without pipeline stages")


@contextmanager
def sharded_sequences(
    mesh: DeviceMesh, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Run the enclosed forward/backward under ring attention; yields this rank's (inputs, targets) slices.

    `inputs` and `targets` are (B, T); T must divide by 2 x cp (head-tail load balancing). The model's
    RoPE tables are swapped for T-row copies that the context shards like the tokens, then restored.
    """
    from torch.distributed.tensor.experimental import context_parallel

    cp = mesh["cp"].size()
    t = inputs.shape[1]
    if t % (2 * cp):
        raise ValueError(f"--cp {cp}: the sequence length {t} must divide by 2 x cp = {2 * cp}")
    inputs, targets = inputs.clone(), targets.clone()  # sharded in place: no views of the batch
    full_cos, full_sin = model.rope_cos, model.rope_sin
    cos, sin = full_cos[:t].clone(), full_sin[:t].clone()
    model.rope_cos, model.rope_sin = cos, sin
    buffers = [inputs, targets, cos, sin]
    ring = context_parallel(mesh["cp"], buffers=buffers, buffer_seq_dims=[1, 1, 0, 0], no_restore_buffers=set(buffers))
    try:
        with sdpa_kernel(_RING_KERNELS), ring:
            yield inputs, targets
    finally:
        model.rope_cos, model.rope_sin = full_cos, full_sin
