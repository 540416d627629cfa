"""Expert parallel: each rank of an `ep` group holds E / ep of every MoE layer's experts; tokens travel.

torchtitan's scheme (`ExpertParallel`), on the `ep` dimension of the job's mesh (`trainer.mesh`):

- the stacked expert weights (E, F, D) become DTensors split on the expert dimension (`Shard(0)`) over
  `ep`, so checkpoints and the HF export see the whole (E, F, D) tensors; FSDP2 then shards each rank's
  experts again over `dp_shard_mod_ep`, the ranks that hold the same experts (2-D DTensors, as TP's);
- in the forward, after the (replicated) router has chosen, the rows sorted by expert are sent to the
  rank holding their expert with one all-to-all (the counts first, with another), computed there in
  groups, and sent back with a second all-to-all; both are autograd-aware, so the backward sends the
  gradients the opposite way. The combine (gate weights, scatter-add) stays on the token's own rank.

Gradients: every data-parallel rank's loss is its own batch's mean and FSDP averages over the ranks
that reduce a tensor. An expert's gradient already sums the contributions of all `ep` ranks' tokens, so
it must be divided by the whole data-parallel degree, not by its FSDP group's (dp_shard_mod_ep x
dp_replicate), which is `ep` times smaller: the local weights' gradient is scaled by 1 / ep on its way
back (`_ScaleGrad`; FSDP's own `set_gradient_divide_factor` needs PREMUL_SUM, which gloo lacks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._functional_collectives import all_to_all_single_autograd
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from trainer.moe import Experts, grouped_swiglu, moe_layers


def _local(weight: torch.Tensor) -> torch.Tensor:
    return weight.to_local() if isinstance(weight, DTensor) else weight


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient times `scale` in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad * ctx.scale, None


class AllToAllExchange:
    """`Experts.exchange` under EP: rows sorted by global expert -> their ranks -> computed -> back."""

    def __init__(self, ep_mesh: DeviceMesh) -> None:
        self.group = ep_mesh.get_group()
        self.ep = ep_mesh.size()

    def __call__(self, xs: torch.Tensor, counts: torch.Tensor, experts: Experts) -> torch.Tensor:
        local = experts.n_experts // self.ep
        send_counts = counts.to(torch.int64)  # (ep x local): rows for each rank's local experts, in order
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=self.group)  # (source rank x local expert)
        send_splits = send_counts.view(self.ep, local).sum(1).tolist()
        recv_splits = recv_counts.view(self.ep, local).sum(1).tolist()
        received = _all_to_all(xs, recv_splits, send_splits, self.group)
        # received is ordered by (source rank, local expert): regroup by local expert for the compute
        expert_of_row = torch.arange(local, device=xs.device).repeat(self.ep).repeat_interleave(recv_counts)
        order = torch.argsort(expert_of_row, stable=True)
        per_expert = recv_counts.view(self.ep, local).sum(0).tolist()
        w1, w3, w2 = (_ScaleGrad.apply(_local(w), 1.0 / self.ep) for w in (experts.w1, experts.w3, experts.w2))
        computed = grouped_swiglu(received[order], per_expert, w1, w3, w2)
        back = torch.empty_like(computed).index_copy(0, order, computed)  # the received order again
        return _all_to_all(back, send_splits, recv_splits, self.group)


def _all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: dist.ProcessGroup) -> torch.Tensor:
    """Autograd-aware all-to-all of rows (its backward is the reverse exchange)."""
    return all_to_all_single_autograd(x.contiguous(), out_splits, in_splits, group)


def check_expert_parallel(n_experts: int, ep: int) -> None:
    if ep > 1 and (n_experts == 0 or n_experts % ep):
        raise ValueError(f"--ep {ep} needs a MoE model whose expert count is a multiple of it, got {n_experts} experts")


def apply_ep(model: nn.Module, ep_mesh: DeviceMesh) -> None:
    """Split every MoE layer's experts over `ep_mesh` (Shard(0)) and route their rows by all-to-all."""
    exchange = AllToAllExchange(ep_mesh)
    for layer in moe_layers(model):
        experts = layer.experts
        for name in ("w1", "w3", "w2"):
            param = getattr(experts, name)
            split = distribute_tensor(param.data, ep_mesh, [Shard(0)], src_data_rank=None)
            experts.register_parameter(name, nn.Parameter(split, requires_grad=param.requires_grad))
        experts.exchange = exchange


def shard_experts(block: nn.Module, mesh: DeviceMesh, mp: MixedPrecisionPolicy, reshard: bool) -> None:
    """fully_shard the block's experts on `mesh` (dp_shard_mod_ep, x dp_replicate under HSDP) before the
    block itself is (which then leaves them out)."""
    for layer in moe_layers(block):
        fully_shard(layer.experts, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
