"""Turn a plain `Transformer` into a trainable, sharded one: TP -> AC -> compile -> FSDP2, in that order.

The order matters (torchtitan): tensor parallel first, so AC and compile see the TP collectives as
part of each block; checkpoint wrappers inside the compiled region so the compiler sees the
recompute; `fully_shard` last, on the data-parallel dimensions of the job's mesh (`trainer.mesh`:
1-D shard = ZeRO-3, 2-D replicate x shard = HSDP), wrapping the compiled blocks so its all-gather
and reduce-scatter hooks stay outside the graph. Over TP-split weights FSDP shards the local
pieces again (2-D DTensors), as torchtitan does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from trainer.expert_parallel import apply_ep, shard_experts
from trainer.mesh import ep_enabled, expert_fsdp_mesh, fsdp_mesh
from trainer.model import Transformer
from trainer.pipeline_parallel import Pipeline, PipelineParts
from trainer.tensor_parallel import apply_tp, tp_enabled

ACMode = Literal["none", "selective", "full"]

# Ops whose outputs selective AC keeps: the matmuls and attention are expensive to redo; the
# pointwise work between them (norms, SiLU, RoPE, residual adds) is cheap to recompute and is
# most of the activation bytes.
_SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _selective_policy(ctx: object, op: object, *args: object, **kwargs: object) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context() -> tuple[object, object]:
    return create_selective_checkpoint_contexts(_selective_policy)


def apply_activation_checkpointing(model: Transformer | PipelineParts, mode: ACMode) -> None:
    """Wrap each block: `full` recomputes the whole block, `selective` only its pointwise ops."""
    if mode == "none":
        return
    if mode not in ("selective", "full"):
        raise ValueError(f"unknown activation checkpointing mode {mode!r}")
    context_fn: Callable[[], tuple[object, object]] | None = _selective_context if mode == "selective" else None
    for name, block in list(model.layers.named_children()):  # a ModuleList, or a pipeline stage's ModuleDict
        kwargs = {"context_fn": context_fn} if context_fn else {}
        model.layers.register_module(name, checkpoint_wrapper(block, preserve_rng_state=False, **kwargs))


def apply_compile(model: Transformer | PipelineParts) -> None:
    """Compile each block in place (same FQNs, one graph reused by all identical blocks)."""
    for block in model.layers.children():
        block.compile(fullgraph=True)


def apply_fsdp(
    model: Transformer | PipelineParts,
    mesh: DeviceMesh,
    param_dtype: torch.dtype | None,
    reduce_dtype: torch.dtype = torch.float32,
    roots: list[nn.Module] | None = None,
    experts: DeviceMesh | None = None,
) -> nn.Module:
    """fully_shard each block, then the root(s): the model (embeddings, final norm, head), or each stage.

    The last block is not resharded after forward: backward starts with it, so gathering it again
    would be wasted communication. Under PP (`roots` = the stages) no block is (torchtitan's
    default): each micro-batch would gather it again. Under EP, `experts` is the experts' FSDP mesh:
    each block's experts are sharded on it first (`trainer.expert_parallel`).
    """
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    blocks = list(model.layers.children())
    for i, block in enumerate(blocks):
        reshard = roots is None and i < len(blocks) - 1
        if experts is not None:
            shard_experts(block, experts, mp, reshard)
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    for root in roots or [model]:
        fully_shard(root, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


def parallelize(
    model: Transformer,
    mesh: DeviceMesh,
    *,
    ac: ACMode = "none",
    compile: bool = False,
    param_dtype: torch.dtype | None = torch.bfloat16,
    pipeline: Pipeline | None = None,
) -> nn.Module:
    """TP (when the mesh's `tp` > 1) or EP (`ep` > 1) -> [PP cut] -> AC -> compile -> fully_shard on the dp dims.

    `mesh` is the job's named mesh (`DistInfo.mesh`). Returns the sharded root, or under PP this
    rank's `PipelineParts` (its stages' modules, the full model's parameter names).
    """
    if tp_enabled(mesh):
        apply_tp(model, mesh["tp"])
    experts = None
    if ep_enabled(mesh):
        apply_ep(model, mesh["ep"])
        experts = expert_fsdp_mesh(mesh)
    target: Transformer | PipelineParts = model if pipeline is None else pipeline.cut(model)
    apply_activation_checkpointing(target, ac)
    if compile:
        apply_compile(target)
    roots = None if pipeline is None else pipeline.make_stages(target)  # type: ignore[arg-type]
    return apply_fsdp(target, fsdp_mesh(mesh), param_dtype=param_dtype, roots=roots, experts=experts)


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Gradient accumulation: skip the reduce-scatter on all but the last micro-batch."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
