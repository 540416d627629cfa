"""Mixture-of-experts feed-forward: a top-k router over E SwiGLU experts, load balancing, capacity.

Plain PyTorch, free of parallelism like the rest of `trainer.model`. The routing follows the
published recipes:

- gates: `softmax` (Mixtral / Qwen-MoE: softmax over all experts, top-k, renormalised over the k,
  so top-1 weighs its expert 1) or `sigmoid` (DeepSeek-V3: independent sigmoid scores, top-k,
  renormalised over the k);
- balance: `aux` (Switch / Mixtral: coef * E * sum_e f_e P_e, f_e the fraction of assignments to
  expert e, P_e its mean gate probability; sigmoid scores are first normalised to sum to 1 per token, as
  DeepSeek-V3's balance loss does, else the loss pulls every score down instead of moving tokens to
  other experts), `bias` (DeepSeek-V3's auxiliary-loss-free balancing: a
  per-expert bias added to the scores for the selection only, moved after each step by
  rate * sign(mean load - load)), or `none`;
- capacity: with `capacity` c > 0 each expert takes at most ceil(c * tokens * k / E) assignments per
  forward in training, first choices before second ones (GShard); the rest are dropped (the token
  keeps its residual) and counted. Evaluation and the export are dropless.

The auxiliary loss does not enter the returned loss: `_AddAuxLoss` hands its gradient in through
the block's output (DeepSeek's trick), so FSDP2's per-block hooks see it as part of the block and
the logged loss stays the language-model loss. Router statistics (assignments per expert, dropped
assignments, the auxiliary loss) accumulate over a step's micro-batches in `RouterStats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig


class _AddAuxLoss(torch.autograd.Function):
    """Identity on `x`; in backward, d(aux)/d(aux) * `scale` flows into `aux` (DeepSeek-MoE's trick)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        ctx.scale, ctx.dtype, ctx.shape = scale, aux.dtype, aux.shape
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[override]
        aux_grad = torch.full(ctx.shape, ctx.scale, dtype=ctx.dtype, device=grad.device)
        return grad, aux_grad, None


ExpertCompute = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# (rows sorted by expert, rows per expert (E,), the experts' compute) -> the rows' outputs, same order
Exchange = Callable[[torch.Tensor, torch.Tensor, "Experts"], torch.Tensor]


def grouped_swiglu(
    xs: torch.Tensor, counts: list[int], w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor
) -> torch.Tensor:
    """Rows `xs` sorted by expert, `counts[e]` of them for expert e of the stacked weights: each group
    through its SwiGLU. Empty groups still touch their weights (a zero gradient), so every rank's
    experts get a gradient whatever the routing sent them (FSDP reduces the same tensors everywhere)."""
    outs, start = [], 0
    for e, count in enumerate(counts):
        rows = xs[start : start + count]
        start += count
        outs.append((F.silu(rows @ w1[e].t()) * (rows @ w3[e].t())) @ w2[e].t())
    return torch.cat(outs) if outs else xs


class Experts(nn.Module):
    """E SwiGLU experts as stacked weights: w1, w3 (E, F, D), w2 (E, D, F) (torchtitan's GroupedExperts).

    `exchange` is where the sorted rows go to be computed: None runs every expert here; expert parallel
    (`trainer.expert_parallel`) sets an all-to-all to the ranks holding each expert and back.
    """

    def __init__(self, n_experts: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.n_experts = n_experts
        self.w1 = nn.Parameter(torch.empty(n_experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(n_experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.exchange: Exchange | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Constructor default only (the model's init plan overwrites it): N(0, 0.02)."""
        for w in (self.w1, self.w3, self.w2):
            nn.init.normal_(w, std=0.02)

    def compute(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The experts held here on rows sorted by (local) expert, `counts` rows each."""
        return grouped_swiglu(xs, counts.tolist(), self.w1, self.w3, self.w2)

    def forward(self, x: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x (N, D); index, weight (N, k): sum_j weight[:, j] * expert_{index[:, j]}(x). An index of E
        (a dropped assignment) contributes nothing."""
        flat_index, flat_weight = index.flatten(), weight.flatten()
        token = torch.arange(x.shape[0], device=x.device).repeat_interleave(index.shape[1])
        counts = torch.bincount(flat_index, minlength=self.n_experts + 1)[: self.n_experts]
        rows = torch.argsort(flat_index, stable=True)[: int(counts.sum())]  # the dropped (index E) sort last
        xs = x[token[rows]]
        ys = self.compute(xs, counts) if self.exchange is None else self.exchange(xs, counts, self)
        return torch.zeros_like(x).index_add_(0, token[rows], ys * flat_weight[rows, None].to(x.dtype))


@dataclass
class RouterStats:
    """What one MoE layer's router did since the last `reset` (a step's micro-batches)."""

    load: torch.Tensor | None = None  # assignments per expert (before capacity drops), fp32 (E,)
    dropped: float = 0.0
    assignments: float = 0.0
    aux_loss: list[torch.Tensor] = field(default_factory=list)

    def add(self, load: torch.Tensor, dropped: torch.Tensor, assignments: int, aux: torch.Tensor) -> None:
        self.load = load if self.load is None else self.load + load
        self.dropped = self.dropped + dropped  # a tensor: read (synced) only when the step is logged
        self.assignments += assignments
        self.aux_loss.append(aux)


def _in_recompute() -> bool:
    """True while activation checkpointing re-runs a forward inside backward: not a new forward."""
    return torch._C._current_graph_task_id() != -1


class MoE(nn.Module):
    """Router + experts (+ an optional always-on shared expert); (B, T, D) -> (B, T, D)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_experts, self.top_k = cfg.moe_experts, cfg.moe_top_k
        self.gate_kind, self.balance = cfg.moe_gate, cfg.moe_balance
        self.capacity, self.aux_coef, self.bias_rate = cfg.moe_capacity, cfg.moe_aux_coef, cfg.moe_bias_rate
        hidden = cfg.expert_ffn_dim
        self.router = nn.Linear(cfg.dim, cfg.moe_experts, bias=False)
        self.experts = Experts(cfg.moe_experts, cfg.dim, hidden)
        self.shared = SharedExpert(cfg.dim, hidden) if cfg.moe_shared_expert else None
        # DeepSeek-V3's selection bias: state, not a weight (no gradient); saved with the model
        self.register_buffer("expert_bias", torch.zeros(cfg.moe_experts), persistent=True)
        self.stats = RouterStats()
        self.aux_scale = 1.0  # the engine sets 1 / micro-batches, as the LM loss is scaled

    def init_buffers(self) -> None:
        self.expert_bias.zero_()

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(gate probabilities (N, E) fp32, top-k index (N, k), top-k weights (N, k) renormalised)."""
        logits = self.router(x).float()
        probs = logits.softmax(-1) if self.gate_kind == "softmax" else logits.sigmoid()
        select = probs + self.expert_bias if self.balance == "bias" else probs
        index = select.topk(self.top_k, dim=-1).indices
        weight = probs.gather(1, index)
        weight = weight / weight.sum(-1, keepdim=True)
        return probs, index, weight

    def _capacity_drop(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Index with assignments beyond each expert's capacity set to E (dropped), and their count."""
        if not (self.training and self.capacity > 0):
            return index, torch.zeros((), device=index.device)
        n, k = index.shape
        limit = math.ceil(self.capacity * n * k / self.n_experts)
        k_major = index.t().reshape(-1)  # all first choices, then all second choices (GShard)
        onehot = F.one_hot(k_major, self.n_experts)
        position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # rank of each assignment in its expert's queue
        keep = (position < limit).view(k, n).t()
        return torch.where(keep, index, self.n_experts), (~keep).sum().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs, index, weight = self.route(flat)
        load = torch.bincount(index.flatten(), minlength=self.n_experts).float()
        share = probs / probs.sum(-1, keepdim=True)  # softmax: probs itself; sigmoid: DeepSeek-V3's normalised scores
        aux = self.aux_coef * self.n_experts * (load / index.numel() * share.mean(0)).sum()
        routed, dropped = self._capacity_drop(index)
        out = self.experts(flat, routed, weight)
        if self.shared is not None:
            out = out + self.shared(flat)
        out = out.view(shape)
        if self.training and not _in_recompute():
            self.stats.add(load.detach(), dropped, index.numel(), aux.detach())
        if self.training and self.balance == "aux" and torch.is_grad_enabled():
            out = _AddAuxLoss.apply(out, aux, self.aux_scale)
        return out


class SharedExpert(nn.Module):
    """A SwiGLU every token passes through besides its routed experts (DeepSeek-MoE's shared expert)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


def set_aux_scale(model: nn.Module, scale: float) -> None:
    """The auxiliary loss's gradient weight per forward: 1 / micro-batches, as the LM loss's."""
    for layer in moe_layers(model):
        layer.aux_scale = scale


@dataclass(frozen=True)
class MoEStepStats:
    """A step's router statistics summed over the ranks, still on the device (reading them syncs)."""

    loads: torch.Tensor  # (layers, E) assignments per expert
    dropped: torch.Tensor  # (layers,)
    aux_loss: torch.Tensor  # (layers,) mean over micro-batches and ranks

    def record(self) -> dict[str, object]:
        """The metrics record's MoE part: the largest load over the mean (1.0 = perfectly even, over the
        layers), the dropped fraction, the mean auxiliary loss; per layer the fraction per expert."""
        loads = self.loads.double().cpu()
        total = loads.sum(-1)
        return {
            "moe_aux_loss": float(self.aux_loss.mean()),
            "moe_max_load": float((loads.max(-1).values / loads.mean(-1)).max()),
            "moe_dropped_frac": float(self.dropped.sum().cpu() / total.sum()),
            "moe": {"load": [[round(float(f), 5) for f in row / row.sum()] for row in loads]},
        }


@torch.no_grad()
def finish_step(model: nn.Module, world_size: int) -> MoEStepStats | None:
    """After the optimizer step: sum the step's router statistics over the ranks, move the selection
    biases (`bias` balancing; identical on every rank since the loads are summed), reset the counters.
    None for a dense model (or a step without a training forward)."""
    layers = moe_layers(model)
    if not layers or layers[0].stats.load is None:
        return None
    rows = []
    for layer in layers:
        s = layer.stats
        assert s.load is not None
        aux = torch.stack(s.aux_loss).mean()
        dropped = torch.as_tensor(s.dropped, device=aux.device, dtype=torch.float32).reshape(1)
        rows.append(torch.cat([s.load.to(aux.device), dropped, aux.reshape(1) / world_size]))
    packed = torch.stack(rows)
    if world_size > 1:
        import torch.distributed as dist

        dist.all_reduce(packed)
    loads = packed[:, :-2]
    for layer, load in zip(layers, loads, strict=True):
        if layer.balance == "bias":
            layer.expert_bias.add_(layer.bias_rate * torch.sign(load.mean() - load).to(layer.expert_bias.device))
        layer.stats = RouterStats()
    return MoEStepStats(loads, packed[:, -2], packed[:, -1])
