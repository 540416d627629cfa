"""MuonClip's QK-clip (Kimi K2, Moonshot 2025): after each update, shrink the heads whose logits grew past tau.

Muon lets the query and key projections grow until a few heads' logits explode (loss spikes); Kimi K2 caps
them at the source instead of with QK-norm. During a step's training forwards every attention layer keeps,
per query head h, S_h = the largest pre-softmax logit q.k / sqrt(head_dim) it let through
(`trainer.model.head_max_logits`); after the optimizer step S is reduced over the ranks (MAX: each saw other
data) and every head with S_h > tau has its weights scaled so its logits shrink by gamma_h = tau / S_h:

- multi-head attention (n_kv_heads == n_heads): head h's rows of W_q and of W_k times sqrt(gamma_h), the
  paper's split for a head's own query and key;
- grouped-query attention: a key head is shared by several query heads, as MLA's rotary key is shared by all
  heads in the paper, which then leaves the shared key alone and scales the head's query by gamma_h; here
  the same: head h's rows of W_q times gamma_h, W_k untouched.

RoPE is a rotation of q and k (linear, norm-preserving) applied after the projections, so scaling a head's
rows scales its logits by exactly gamma_h: with the same input, the next forward's maximum is tau. μP's query
scale (`trainer.mup.query_scale`) is inside the logits measured, so it is clipped the same way. QK-norm is
refused: the norm undoes any scaling of W_q / W_k (Kimi K2 clips because MLA cannot use QK-norm).

Under FSDP2 W_q and W_k are DTensors sharded by rows: the per-row factor is cut with the weight's own
placements, so each rank scales its local rows of the right heads (a head may straddle two ranks); blocks
still gathered from the forward are resharded first, so the shards, not a gathered copy, are scaled. The
clip keeps no state: the weights it changes are checkpointed as usual, so a resumed run is the same run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, distribute_tensor

from trainer.config import ModelConfig
from trainer.model import Attention


def check_qk_clip(optimizer: str, cfg: ModelConfig, cp: int) -> None:
    """MuonClip's optimizer, and the layouts and models the clip is exact for (a ValueError, one line, otherwise)."""
    if optimizer != "muon":
        raise ValueError("--muon-qk-clip is MuonClip's: it needs --optimizer muon")
    if cfg.qk_norm:
        raise ValueError("--muon-qk-clip does not apply with --qk-norm (the norm undoes any scaling of W_q, W_k)")
    if cp > 1:
        raise ValueError("--muon-qk-clip needs whole sequences on each rank (--cp 1)")


def attention_layers(model: nn.Module) -> list[Attention]:
    return [m for m in model.modules() if isinstance(m, Attention)]


def track_qk_max(model: nn.Module, device: torch.device) -> None:
    """Make every attention layer record its per-head maximum logit in training forwards (off: not tracked)."""
    for attention in attention_layers(model):
        attention.qk_max = torch.full((attention.n_heads,), -math.inf, device=device)


@dataclass(frozen=True)
class QKClipStats:
    """A step's per-head maxima (layers, heads) before the clip, reduced over the ranks, still on the device."""

    maxima: torch.Tensor
    tau: float

    def record(self) -> dict[str, object]:
        """The metrics record's part: the largest logit of the step and how many heads were clipped."""
        return {"qk_max": float(self.maxima.max()), "qk_clipped_heads": int((self.maxima > self.tau).sum())}


def _scale_heads(weight: torch.Tensor, factors: torch.Tensor, head_dim: int) -> None:
    """Rows h * head_dim .. (h + 1) * head_dim of `weight` times factors[h]; a sharded weight scales its own rows."""
    rows = factors.repeat_interleave(head_dim)[:, None].to(weight.dtype)
    if isinstance(weight, DTensor):  # the same values on every rank (reduced): cut, no broadcast
        rows = distribute_tensor(rows, weight.device_mesh, weight.placements, src_data_rank=None)
    weight.mul_(rows)


@torch.no_grad()
def qk_clip(model: nn.Module, tau: float, world_size: int, apply: bool = True) -> QKClipStats | None:
    """After the optimizer step: reduce the step's maxima over the ranks, scale the heads above `tau` (unless
    `apply` is False: a step the spike guard skipped changes nothing) and reset the maxima for the next step.
    None when the maxima are not tracked (`track_qk_max`)."""
    layers = attention_layers(model)
    tracked = [a.qk_max for a in layers if a.qk_max is not None]
    if not tracked:
        return None
    for module in model.modules():  # FSDP2 keeps the last block gathered after a forward: scale the shards
        if isinstance(module, FSDPModule):
            module.reshard()
    maxima = torch.stack(tracked)
    if world_size > 1:
        dist.all_reduce(maxima, op=dist.ReduceOp.MAX)
    for attention, heads in zip(layers, maxima, strict=True):
        gamma = torch.where(heads > tau, tau / heads, torch.ones_like(heads))
        if apply:  # a factor of 1.0 leaves a weight bit for bit
            if attention.n_kv_heads == attention.n_heads:
                _scale_heads(attention.wq.weight, gamma.sqrt(), attention.head_dim)
                _scale_heads(attention.wk.weight, gamma.sqrt(), attention.head_dim)
            else:  # a shared key head: the query takes the whole factor
                _scale_heads(attention.wq.weight, gamma, attention.head_dim)
        attention.qk_max = torch.full_like(heads, -math.inf)
    return QKClipStats(maxima, tau)
