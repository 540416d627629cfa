"""Process-group setup: torchrun's environment when present, otherwise a one-rank group in-process.

FSDP2 needs a process group even for one rank; the in-process group lets the pipeline call
`train()` directly without torchrun.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh
    owns_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistInfo:
    """Join (or create) the default process group: NCCL on CUDA, gloo on CPU."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    owns = False
    if not dist.is_initialized():
        owns = True
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend, device_id=dev if use_cuda else None)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    world = dist.get_world_size()
    mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("dp",))
    return DistInfo(dist.get_rank(), world, local_rank, dev, mesh, owns)


def shutdown(info: DistInfo) -> None:
    """Tear down the group only if we created it (the caller may own it)."""
    if info.owns_group and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean over ranks (gloo has no ReduceOp.AVG, so sum and divide)."""
    out = value.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()
