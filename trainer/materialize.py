"""Build the model on the meta device, shard it, then allocate and initialise it shard by shard.

torchtitan's order: no rank ever holds the whole model. The numbers are the ones the full-model
path draws (`torch.manual_seed(seed)` then `Transformer(cfg)` on the same device), bit for bit:
that path first draws each layer's constructor default (nn.Linear's Kaiming-uniform, nn.Embedding's
N(0, 1)), then overwrites every weight in `Transformer.init_plan` order. One random stream is
sequential, so it cannot be cut into per-shard pieces; instead each rank replays the whole stream
one parameter at a time on a full-size scratch tensor and keeps only its own shard of it.

Peak extra memory per rank: one full parameter, the largest being the embedding (vocab x dim, fp32:
0.5 GiB for the 7B preset's 32k x 4096), instead of the whole model (25 GiB for 7B in fp32). The
time is the full-model path's: every rank still draws every number.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from trainer.config import ModelConfig
from trainer.model import InitStep, Transformer


class _InitReplay:
    """What the full-model path draws, captured from the meta model before sharding changes it."""

    def __init__(self, model: Transformer) -> None:
        # Constructor draws: every module that owns parameters, in construction (registration) order,
        # kept as a meta copy (no memory) to re-run its own `reset_parameters` at full size later.
        owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
        if any(next(m.children(), None) is not None for m in owners):
            raise TypeError("init replay needs parameters owned by leaf modules (nn.Linear, nn.Embedding, norms)")
        self.constructed = [copy.deepcopy(m) for m in owners]
        # Sharding replaces parameters but keeps the modules that own them: hold modules, not tensors.
        self.plan: list[InitStep] = list(model.init_plan())

    @torch.no_grad()
    def run(self, seed: int, device: torch.device) -> None:
        torch.manual_seed(seed)  # the same seed on every rank: the same full tensors, one shard kept each
        for twin in self.constructed:
            twin.to_empty(device=device)
            reset = getattr(twin, "reset_parameters", None)
            if reset is not None:
                reset()  # drawn only to advance the random stream as the constructor did
            twin.to_empty(device="meta")  # free it before the next one
        for module, name, init in self.plan:
            param = getattr(module, name)
            full = torch.empty(param.shape, dtype=param.dtype, device=device)
            init(full)
            _copy_local_shard(param, full)


def _copy_local_shard(param: torch.Tensor, full: torch.Tensor) -> None:
    """Write this rank's piece of `full` into `param` (a DTensor shard, or a plain tensor).

    A parameter still on `meta` belongs to another pipeline stage: drawn (above), not kept.
    """
    if param.is_meta:
        return
    if isinstance(param, DTensor):
        # src_data_rank=None: every rank holds the same full tensor, so cut locally, no communication
        mine = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(mine.to_local())
    else:
        param.copy_(full)


def build_sharded(
    model_cfg: ModelConfig,
    shard: Callable[[Transformer], nn.Module],
    device: torch.device,
    seed: int,
) -> nn.Module:
    """meta build -> `shard` (TP, [PP cut], AC, compile, fully_shard) -> `to_empty` -> init per shard.

    `shard` returns the model itself (sharding wraps its children, not the root) or, under PP, this
    rank's stages' modules; either has `init_buffers`.
    """
    with torch.device("meta"):
        model = Transformer(model_cfg)
    replay = _InitReplay(model)
    sharded = shard(model)
    sharded.to_empty(device=device)
    replay.run(seed, device)
    sharded.init_buffers()  # type: ignore[operator]
    return sharded
