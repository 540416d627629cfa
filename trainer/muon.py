"""Muon for the hidden matrices, AdamW for the rest, in one optimizer that works on FSDP2 shards.

Muon (Keller Jordan 2024; Moonshot's "Muon is scalable", 2025): momentum (Nesterov), then the update
matrix is orthogonalised by five quintic Newton-Schulz steps (bf16, torch.optim.Muon's coefficients),
scaled by 0.2 sqrt(max(rows, cols)) so its RMS matches AdamW's and the AdamW learning rate and schedule
carry over, with decoupled weight decay. It takes every >= 2-D weight inside the blocks (attention and
MLP matrices, the router, each expert's matrices of a stacked (E, F, D) tensor as its own matrix);
AdamW (the recipe's betas, decay on >= 2-D only) takes the embedding, the head and the norm gains.

Under FSDP2 a parameter is a DTensor sharded on dim 0: the orthogonalisation needs the whole matrix,
so each Muon step all-gathers the momentum-corrected update (`full_tensor`), orthogonalises it on every
rank and keeps the local shard (every rank does every matrix: simple and exact; OLMo-core / Dion spread
the matrices over the ranks instead). Momentum, weight decay and the AdamW moments stay elementwise on
the shards, so the step equals the single-process one (`tests/trainer/test_muon.py`). The state is an
ordinary optimizer state of DTensors: DCP checkpoints and resumes it like AdamW's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's (Keller Jordan's) quintic
NS_STEPS = 5
_NOT_MUON = ("tok_embeddings", "output")  # the embedding and the head stay on AdamW


def newton_schulz(update: torch.Tensor, steps: int = NS_STEPS, eps: float = 1e-7) -> torch.Tensor:
    """~U V^T of the last two dims (batched over the leading ones), in bf16 as torch.optim.Muon does."""
    a, b, c = NS_COEFFICIENTS
    x = update.bfloat16()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    if x.ndim == 2:  # torch.optim.Muon's ops exactly (same bf16 roundings)
        x = x / x.norm().clamp(min=eps)
        for _ in range(steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    else:  # stacked experts: one matrix per leading index
        x = x.flatten(0, -3)
        x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
        for _ in range(steps):
            gram = x @ x.mT
            x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        x = x.view(*update.shape[:-2], *x.shape[-2:])
    return x.mT if tall else x


def _orthogonalised(update: torch.Tensor) -> torch.Tensor:
    """Newton-Schulz on the whole matrix: a sharded DTensor is gathered, orthogonalised, cut again."""
    if not isinstance(update, DTensor):
        return newton_schulz(update).to(update.dtype)
    full = newton_schulz(update.full_tensor()).to(update.dtype)
    return distribute_tensor(full, update.device_mesh, update.placements, src_data_rank=None)


def rms_matched_lr(lr: float, shape: torch.Size) -> float:
    """Moonshot's scale: 0.2 sqrt(max(A, B)) makes the update's RMS AdamW's, so the AdamW LR transfers."""
    return lr * 0.2 * math.sqrt(max(shape[-2], shape[-1]))


class MuonAdamW(torch.optim.Optimizer):
    """Groups with `muon: True` step with Muon, the others with AdamW; one state dict, one LR schedule."""

    def __init__(
        self,
        groups: list[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        momentum: float = 0.95,
        nesterov: bool = True,
    ) -> None:
        defaults = {"lr": lr, "betas": betas, "eps": eps, "momentum": momentum, "nesterov": nesterov,
                    "weight_decay": 0.0, "muon": False}  # fmt: skip
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                (self._muon if group["muon"] else self._adamw)(p, group)

    def _muon(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf, grad, mu = state["momentum_buffer"], p.grad, group["momentum"]
        buf.lerp_(grad, 1 - mu)
        update = grad.lerp(buf, mu) if group["nesterov"] else buf
        update = _orthogonalised(update)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update, alpha=-rms_matched_lr(group["lr"], p.shape))

    def _adamw(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        """torch.optim.AdamW's formula (single-tensor path)."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        (beta1, beta2), lr = group["betas"], group["lr"]
        state["step"] += 1
        step = float(state["step"])
        p.mul_(1 - lr * group["weight_decay"])
        state["exp_avg"].lerp_(p.grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        bias1, bias2 = 1 - beta1**step, 1 - beta2**step
        denom = (state["exp_avg_sq"].sqrt() / math.sqrt(bias2)).add_(group["eps"])
        p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)


def is_muon_param(name: str, param: torch.Tensor) -> bool:
    """A >= 2-D weight inside the blocks (not the embedding or the head, which stay on AdamW)."""
    return param.ndim >= 2 and name.split(".")[0] not in _NOT_MUON


def muon_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Muon on the hidden matrices; AdamW with decay on the embedding / head, without on the gains."""
    muon, adam_decay, adam_plain = [], [], []
    for name, p in model.named_parameters():  # a tied head is the embedding: listed once
        if not p.requires_grad:
            continue
        if is_muon_param(name, p):
            muon.append(p)
        else:
            (adam_decay if p.ndim >= 2 else adam_plain).append(p)
    return [
        {"params": muon, "weight_decay": weight_decay, "muon": True},
        {"params": adam_decay, "weight_decay": weight_decay, "muon": False},
        {"params": adam_plain, "weight_decay": 0.0, "muon": False},
    ]


def build_muon(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    momentum: float = 0.95,
    mup_width_mult: float | None = None,
) -> MuonAdamW:
    """With `mup_width_mult` (μP on) the Muon group trains at lr / sqrt(m): `trainer.mup` says why."""
    groups = muon_groups(model, weight_decay)
    if mup_width_mult is not None:  # groups[0] is Muon's; the AdamW groups (embedding, head, gains) keep lr
        factor = math.sqrt(mup_width_mult)
        groups[0] = {**groups[0], "lr": lr / factor, "weight_decay": weight_decay * factor}
    return MuonAdamW(groups, lr, betas=betas, momentum=momentum)
