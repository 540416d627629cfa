"""One named DeviceMesh for every way the job is split: pipeline, data (replicate x shard), context, tensor.

torchtitan's layout: dimensions ordered outermost first, `pp`, `dp_replicate`, `dp_shard`, `cp`, `tp`,
so the innermost (`tp`, the most talkative: two collectives per block) spans neighbouring ranks, which
torchrun places on one node, and `dp_replicate` (one all-reduce per step) spans nodes. The product of
the degrees is the world size; by default every rank is in `dp_shard` (plain FSDP, ZeRO-3).

Expert parallel (`ep`, torchtitan's too) borrows its ranks from `dp_shard` instead of adding to the
world: `dp_shard` is laid out as (`dp_shard_mod_ep`, `ep`) and flattened back to `dp_shard`, so the
dense parts shard over all of it as before, each `ep` group splits the experts between its ranks
(tokens travel by all-to-all, `trainer.expert_parallel`) and the ranks holding the same experts,
`dp_shard_mod_ep`, shard those.

The data loader sees only the data-parallel coordinate: ranks that differ only in `tp`, `cp` or `pp`
read the same windows.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class ParallelDims:
    """Degrees of each mesh dimension; `dp_shard=-1` means whatever the others leave of the world."""

    dp_replicate: int = 1
    dp_shard: int = -1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # expert parallel: a split of dp_shard, not a factor of the world size

    @classmethod
    def of(cls, cfg: Any) -> ParallelDims:
        """The degrees named by a config's fields of the same names (TrainConfig's --dp-shard, --tp, ...)."""
        return cls(**{name: getattr(cfg, name) for name in ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")})

    def resolve(self, world_size: int) -> ParallelDims:
        """Fill `dp_shard=-1` and check that the degrees multiply to the world size (one-line errors)."""
        others = {"dp_replicate": self.dp_replicate, "tp": self.tp, "pp": self.pp, "cp": self.cp}
        for name, degree in {**others, "dp_shard": self.dp_shard}.items():
            if degree < 1 and not (name == "dp_shard" and degree == -1):
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (dp-shard also -1: the rest), got {degree}")
        rest = math.prod(others.values())
        dims = self
        if self.dp_shard == -1:
            if world_size % rest:
                raise ValueError(f"world size {world_size} is not a multiple of dp_replicate x tp x pp x cp = {rest}")
            dims = replace(self, dp_shard=world_size // rest)
        if dims.world_size != world_size:
            raise ValueError(
                f"dp_replicate {dims.dp_replicate} x dp_shard {dims.dp_shard} x tp {dims.tp} x pp {dims.pp} "
                f"x cp {dims.cp} = {dims.world_size}, but the job has {world_size} ranks"
            )
        dims.check_ep()
        return dims

    def check_ep(self) -> None:
        """`ep` splits `dp_shard` and composes with FSDP / HSDP only (TP, PP and CP are refused, one line)."""
        if self.ep < 1:
            raise ValueError(f"--ep must be >= 1, got {self.ep}")
        if self.ep > 1 and self.dp_shard % self.ep:
            raise ValueError(
                f"--ep {self.ep} must divide dp_shard {self.dp_shard}: expert parallel splits the FSDP ranks"
            )
        if self.ep > 1 and (self.tp > 1 or self.pp > 1 or self.cp > 1):
            raise ValueError("expert parallel (--ep > 1) composes with FSDP / HSDP only (--tp 1 --pp 1 --cp 1)")

    @property
    def world_size(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.cp * self.tp

    @property
    def dp_size(self) -> int:
        """How many different batches one step reads (data-parallel replicas of the model)."""
        return self.dp_replicate * self.dp_shard

    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in MESH_DIMS)

    def _ep_layout(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The world mesh's sizes and names with `dp_shard` split as (dp_shard_mod_ep, ep)."""
        sizes, names = [], []
        for name, size in zip(MESH_DIMS, self.sizes(), strict=True):
            if name == "dp_shard":
                sizes += [size // self.ep, self.ep]
                names += ["dp_shard_mod_ep", "ep"]
            else:
                sizes.append(size)
                names.append(name)
        return tuple(sizes), tuple(names)

    def build_mesh(self, device_type: str) -> DeviceMesh:
        """The world mesh with every dimension named, size-1 ones too (so code can ask any dim its size).

        Under CP also `dp_shard_cp` (dp_shard x cp flattened): FSDP's shard dimension, as in torchtitan.
        Under EP `dp_shard` is the flattened (dp_shard_mod_ep, ep) pair (module docstring).
        """
        if self.ep > 1:
            sizes, names = self._ep_layout()
            mesh = init_device_mesh(device_type, sizes, mesh_dim_names=names)
            mesh["dp_shard_mod_ep", "ep"]._flatten("dp_shard")
            return mesh
        mesh = init_device_mesh(device_type, self.sizes(), mesh_dim_names=MESH_DIMS)
        if self.cp > 1:
            mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        return mesh


def check_runs_on(dims: ParallelDims, device_type: str) -> None:
    """Refuse, in one line, a degree the device at hand cannot run."""
    if dims.cp > 1 and device_type != "cuda":
        raise ValueError(
            f"context parallel (--cp {dims.cp}) cannot run on {device_type}: torch's ring attention "
            "(context_parallel) needs CUDA's flash or memory-efficient attention kernels, which gloo ranks lack"
        )


def dp_coordinate(mesh: DeviceMesh) -> tuple[int, int]:
    """(this rank's data-parallel rank, data-parallel size): which slice of each global batch it reads.

    Replicate-major, as the flattened (dp_replicate, dp_shard) dimension would number it.
    """
    replicate, shard = mesh["dp_replicate"], _sliced(mesh, ("dp_shard",))  # flattened under EP
    return replicate.get_local_rank() * shard.size() + shard.get_local_rank(), replicate.size() * shard.size()


def fsdp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """FSDP2's mesh: 2-D (replicate x shard) for HSDP, else the shard dimension alone (ZeRO-3).

    Under context parallel the shard dimension is dp_shard x cp: cp ranks hold different tokens of
    the same batch, so their gradients are averaged (and their parameters sharded) with dp_shard's.
    """
    shard = "dp_shard_cp" if mesh["cp"].size() > 1 else "dp_shard"
    names = ("dp_replicate", shard) if mesh["dp_replicate"].size() > 1 else (shard,)
    return _sliced(mesh, names)


def _sliced(mesh: DeviceMesh, names: tuple[str, ...]) -> DeviceMesh:
    """mesh[names], where some may be flattened dims (dp_shard_cp; dp_shard under EP)."""
    with warnings.catch_warnings():  # torch 2.13 warns that slicing a flattened dim will be deprecated
        warnings.filterwarnings("ignore", message="Slicing a flattened dim")
        return mesh[names]


def ep_enabled(mesh: DeviceMesh) -> bool:
    return "ep" in (mesh.mesh_dim_names or ()) and mesh["ep"].size() > 1


def expert_fsdp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """FSDP2's mesh for the experts under EP: the ranks holding the same experts (x the replicas, HSDP)."""
    names = ("dp_replicate", "dp_shard_mod_ep") if mesh["dp_replicate"].size() > 1 else ("dp_shard_mod_ep",)
    return mesh[names]


def dim_size(mesh: DeviceMesh, name: str) -> int:
    return mesh[name].size()
