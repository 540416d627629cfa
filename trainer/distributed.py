"""Process-group setup: torchrun's environment when present, otherwise a one-rank group in-process.

FSDP2 needs a process group even for one rank; the in-process group lets the pipeline call
`train()` directly without torchrun. The job's named DeviceMesh (`trainer.mesh`) is built here, once,
so every component reads its dimension from the same mesh.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from trainer.mesh import ParallelDims, check_runs_on, dp_coordinate

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh  # named dims: pp, dp_replicate, dp_shard, cp, tp
    owns_group: bool
    dims: ParallelDims = ParallelDims(dp_shard=1)
    dp_rank: int = 0  # which slice of each global batch this rank reads
    dp_size: int = 1  # data-parallel replicas: the ranks that read different batches

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto", dims: ParallelDims | None = None) -> DistInfo:
    """Join (or create) the default process group (NCCL on CUDA, gloo on CPU) and lay out the mesh.

    `dims` default: every rank in `dp_shard` (plain FSDP).
    """
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
    info = DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, dev, None, owns)  # type: ignore[arg-type]
    try:
        return relayout(info, dims or ParallelDims())
    except ValueError:
        if owns:
            dist.destroy_process_group()
        raise


def relayout(info: DistInfo, dims: ParallelDims) -> DistInfo:
    """The same processes under another layout: a new named mesh (collective: every rank calls it)."""
    check_runs_on(dims, info.device.type)
    resolved = dims.resolve(info.world_size)
    mesh = resolved.build_mesh(info.device.type)
    dp_rank, dp_size = dp_coordinate(mesh)
    return replace(info, mesh=mesh, dims=resolved, dp_rank=dp_rank, dp_size=dp_size)


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


def rank0_verdict(check: Callable[[], T], refusals: type[Exception] | tuple[type[Exception], ...]) -> T | None:
    """Run `check` on rank 0 alone (a checksum, a lock: done once); when it raises one of `refusals`, every
    rank raises that error (rank 0's type and one-line message), so all refuse together instead of the
    others waiting in the next collective. Returns `check`'s result on rank 0, None elsewhere. Collective."""
    group = dist.is_initialized() and dist.get_world_size() > 1
    result, verdict, unexpected = None, [None], None
    if not group or dist.get_rank() == 0:
        try:
            result = check()
        except refusals as err:
            verdict[0] = (type(err), str(err))
        except Exception as err:  # a defect, or a store client's error that is no OSError: raised on every rank,
            unexpected = err  # rank 0 with its traceback (the others waited in the broadcast for ever)
            verdict[0] = (RuntimeError, f"rank 0 failed: {type(err).__name__}: {err}")
    if group:
        dist.broadcast_object_list(verdict, src=0)
    if unexpected is not None:
        raise unexpected
    if verdict[0] is not None:
        kind, message = verdict[0]
        raise kind(message)
    return result
