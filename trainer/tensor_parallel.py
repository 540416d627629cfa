"""Tensor parallel with sequence parallel for the Llama block (Megatron-LM's split, torchtitan's plan).

Per block, two all-gathers and two reduce-scatters on the `tp` mesh dimension, nothing else:

- q/k/v and w1/w3 are split column-wise (each rank owns whole heads / a slice of the hidden size),
  wo and w2 row-wise, so the attention and the SwiGLU run on local shards with no communication;
- between blocks the activations are split along the sequence (`Shard(1)`): the norms and residual
  adds run on T / tp tokens (sequence parallel), the all-gather before q/k/v and w1/w3 and the
  reduce-scatter after wo and w2 replace Megatron's all-reduces at the same volume;
- the output head is column-wise with its logits left sharded over the vocabulary, and the loss is
  computed on them in place (`loss_parallel`), so no rank ever holds the full (B, T, vocab) logits.

The model stays plain (`trainer/model.py`): after the split, each attention module is told its local
head counts, the one thing its reshapes need.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from trainer.model import Transformer


class HeadwiseNorm(ParallelStyle):
    """QK-norm under TP: the per-head RMSNorm weight replicated on the TP mesh, its input split by heads.

    q and k arrive as local (B, T, heads / tp, head_dim) tensors. Marking them `Shard(2)` lets DTensor
    sum the weight's gradient over every rank's heads (a plain replicated weight would see only its own).
    """

    @staticmethod
    def _to_dtensor(mod: nn.Module, inputs: tuple[Any, ...], mesh: DeviceMesh) -> tuple[Any, ...]:
        return (DTensor.from_local(inputs[0], mesh, (Shard(2),), run_check=False), *inputs[1:])

    @staticmethod
    def _to_local(mod: nn.Module, output: DTensor, mesh: DeviceMesh) -> torch.Tensor:
        return output.to_local()

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        return distribute_module(module, device_mesh, None, self._to_dtensor, self._to_local)


def _block_plan(qk_norm: bool) -> dict[str, ParallelStyle]:
    plan: dict[str, ParallelStyle] = {
        "attention_norm": SequenceParallel(),
        # (x, cos, sin, mask): gather x's sequence before the column-wise projections; RoPE tables and
        # the document mask (None unless --document-masking) stay plain
        "attention": PrepareModuleInput(
            input_layouts=(Shard(1), None, None, None), desired_input_layouts=(Replicate(), None, None, None)
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    if qk_norm:
        plan["attention.q_norm"] = HeadwiseNorm()
        plan["attention.k_norm"] = HeadwiseNorm()
    return plan


def check_tp_divides(model: Transformer, tp: int) -> None:
    """Whole heads and whole rows per rank, or a one-line error naming the shape that does not split."""
    cfg = model.cfg
    for name, size in (
        ("n_heads", cfg.n_heads),
        ("n_kv_heads", cfg.n_kv_heads),
        ("ffn_dim", cfg.ffn_dim),
        ("vocab_size", cfg.vocab_size),
    ):
        if size % tp:
            raise ValueError(f"tensor parallel degree {tp} does not divide the model's {name} ({size})")


def apply_tp(model: Transformer, tp_mesh: DeviceMesh) -> None:
    """Split the embeddings, every block and the head over `tp_mesh`, in place (meta or real tensors).

    Sequences must be divisible by the TP degree (sequence parallel splits them).
    """
    tp = tp_mesh.size()
    check_tp_divides(model, tp)
    tied = model.cfg.tie_embeddings
    parallelize_module(
        model,
        tp_mesh,
        {
            # vocab-split lookup; its reduce-scatter leaves the sequence split for the first block
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
        },
    )
    if tied:  # both halves are Shard(0) over the vocabulary: one parameter again
        model.output.weight = model.tok_embeddings.weight
    for block in model.layers:
        parallelize_module(block, tp_mesh, _block_plan(model.cfg.qk_norm))
        block.attention.n_heads //= tp
        block.attention.n_kv_heads //= tp


def tp_enabled(mesh: DeviceMesh) -> bool:
    return mesh["tp"].size() > 1


@contextlib.contextmanager
def loss_context(mesh: DeviceMesh) -> Iterator[None]:
    """`loss_parallel` when the logits are vocab-sharded (TP), otherwise nothing."""
    with loss_parallel() if tp_enabled(mesh) else contextlib.nullcontext():
        yield


def as_plain(value: torch.Tensor) -> torch.Tensor:
    """A loss that loss_parallel left as a (replicated) DTensor, as a plain tensor."""
    return value.full_tensor() if isinstance(value, DTensor) else value
