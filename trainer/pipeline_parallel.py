"""Pipeline parallel with torch.distributed.pipelining: the blocks split into stages over the `pp` mesh dim.

torchtitan's recipe, on our plain model: the (meta) `Transformer` is cut into stages of consecutive
blocks (the first also embeds, the last also norms and projects), each stage becomes a
`PipelineStage` on the `pp` process group, and a schedule runs the step's gradient-accumulation
micro-batches through them (1F1B; Interleaved1F1B and InterleavedZeroBubble with two stages per
rank, looped: rank p holds stages p and p + pp). TP and FSDP apply inside each stage as without PP.

This rank's stages live in one `PipelineParts` module whose parameter names are the full model's
(`layers.7.attention.wq.weight`), so checkpoints written under any layout load under any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)
from torch.distributed.tensor import DTensor

from trainer.model import Transformer, lm_loss
from trainer.tensor_parallel import as_plain, loss_context

PPSchedule = Literal["1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "GPipe"]
_SCHEDULES = {
    "1F1B": Schedule1F1B,
    "GPipe": ScheduleGPipe,
    "Interleaved1F1B": ScheduleInterleaved1F1B,
    "InterleavedZeroBubble": ScheduleInterleavedZeroBubble,
}
_STAGES_PER_RANK = {"1F1B": 1, "GPipe": 1, "Interleaved1F1B": 2, "InterleavedZeroBubble": 2}


def stage_layers(n_layers: int, n_stages: int) -> list[range]:
    """Consecutive blocks per stage, as even as possible (earlier stages take the remainder)."""
    if n_layers < n_stages:
        raise ValueError(f"{n_layers} layers cannot fill {n_stages} pipeline stages (one block per stage at least)")
    base, extra = divmod(n_layers, n_stages)
    bounds = [0]
    for s in range(n_stages):
        bounds.append(bounds[-1] + base + (s < extra))
    return [range(bounds[s], bounds[s + 1]) for s in range(n_stages)]


class PipelineParts(nn.Module):
    """The modules of this rank's stages under the full model's names, plus the RoPE tables."""

    def __init__(self, model: Transformer, layer_ids: list[int], first: bool, last: bool) -> None:
        super().__init__()
        self.cfg = model.cfg
        if first:
            self.tok_embeddings = model.tok_embeddings
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in layer_ids})
        if last:
            self.norm, self.output = model.norm, model.output
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)

    def init_buffers(self) -> None:
        """The same tables as the full model's (after `to_empty` buffers hold garbage)."""
        Transformer.init_buffers(self)  # type: ignore[arg-type]  # reads only cfg and the two buffers


class _Stage(nn.Module):
    """One pipeline stage: [embed] -> its blocks -> [norm -> head], Transformer.forward cut in pieces."""

    def __init__(self, parts: PipelineParts, layer_ids: range, first: bool, last: bool, seq_split: int) -> None:
        super().__init__()
        # under sequence parallel a stage receives T / tp tokens per rank; the RoPE tables need all T
        self.first, self.last, self.seq_split = first, last, seq_split
        if first:
            self.tok_embeddings = parts.tok_embeddings
        self.layers = nn.ModuleDict({str(i): parts.layers[str(i)] for i in layer_ids})
        if last:
            self.norm, self.output = parts.norm, parts.output
        object.__setattr__(self, "_parts", parts)  # not a child: the parts own the RoPE buffers

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        t = h.shape[1] if self.first else h.shape[1] * self.seq_split
        if self.first:
            h = self.tok_embeddings(h)
        cos, sin = self._parts.rope_cos[:t].to(h.dtype), self._parts.rope_sin[:t].to(h.dtype)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        return self.output(self.norm(h)) if self.last else h


def _check_pp(model: Transformer) -> None:
    if model.cfg.tie_embeddings:
        raise ValueError("pipeline parallel needs untied embeddings (--untied): the tie would span two stages")


class Pipeline:
    """This rank's stages and the schedule that drives them; built by `split`, stepped by `forward_backward`."""

    def __init__(self, mesh: DeviceMesh, device: torch.device, schedule: PPSchedule, z_loss: float = 0.0) -> None:
        if schedule not in _SCHEDULES:
            raise ValueError(f"unknown pipeline schedule {schedule!r}; choose from {sorted(_SCHEDULES)}")
        self.mesh, self.device, self.schedule_name, self.z_loss = mesh, device, schedule, z_loss
        self.pp_mesh = mesh["pp"]
        self.pp, self.pp_rank = self.pp_mesh.size(), self.pp_mesh.get_local_rank()
        self.n_stages = self.pp * _STAGES_PER_RANK[schedule]
        self.stage_modules: list[_Stage] = []
        self._schedules: dict[int, object] = {}

    @property
    def has_last_stage(self) -> bool:
        return any(m.last for m in self.stage_modules)

    @property
    def has_first_stage(self) -> bool:
        return any(m.first for m in self.stage_modules)

    def cut(self, model: Transformer) -> PipelineParts:
        """The modules of this rank's stages (looped: stages p, p + pp, ...), under the full model's names."""
        _check_pp(model)
        self._ranges = stage_layers(model.cfg.n_layers, self.n_stages)
        self._stage_ids = list(range(self.pp_rank, self.n_stages, self.pp))
        ids = [i for s in self._stage_ids for i in self._ranges[s]]
        return PipelineParts(model, ids, first=0 in self._stage_ids, last=self.n_stages - 1 in self._stage_ids)

    def make_stages(self, parts: PipelineParts) -> list[nn.Module]:
        """One module per stage over `parts`' (already wrapped or compiled) blocks; FSDP roots go on these."""
        tp = self.mesh["tp"].size()
        last = self.n_stages - 1
        self.stage_modules = [_Stage(parts, self._ranges[s], s == 0, s == last, seq_split=tp) for s in self._stage_ids]
        return list(self.stage_modules)

    def _schedule(self, n_micro: int) -> object:
        """One schedule per micro-batch count (the count is the step's gradient accumulation)."""
        if n_micro not in self._schedules:
            if self.schedule_name == "1F1B" and n_micro < self.pp:
                raise ValueError(
                    f"1F1B over {self.pp} stages needs at least {self.pp} micro-batches per step "
                    f"(--grad-accum, and --val-batches for eval), got {n_micro}"
                )
            group = self.pp_mesh.get_group()
            stages = [
                PipelineStage(module, s, self.n_stages, self.device, group=group)
                for module, s in zip(self.stage_modules, self._stage_ids, strict=True)
            ]
            cls = _SCHEDULES[self.schedule_name]
            loss = self._loss
            if _STAGES_PER_RANK[self.schedule_name] == 1:
                self._schedules[n_micro] = cls(stages[0], n_microbatches=n_micro, loss_fn=loss, scale_grads=True)
            else:
                self._schedules[n_micro] = cls(stages, n_microbatches=n_micro, loss_fn=loss, scale_grads=True)
        return self._schedules[n_micro]

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return lm_loss(logits, targets, self.z_loss)

    def forward_backward(self, micro_batches: list[torch.Tensor]) -> torch.Tensor:
        """The step's micro-batches through the pipeline: the mean loss, on every rank of the pipeline.

        Gradients land in the stages' parameters, scaled by 1 / micro-batches (as accumulation does).
        """
        return self._run(micro_batches, train=True)

    @torch.no_grad()
    def evaluate(self, batches: list[torch.Tensor]) -> torch.Tensor:
        """Mean loss of held-out batches, each one a pipeline micro-batch, forward only."""
        return self._run(batches, train=False)

    def _run(self, micro_batches: list[torch.Tensor], train: bool) -> torch.Tensor:
        batch = torch.cat(micro_batches).to(self.device)
        schedule = self._schedule(len(micro_batches))
        run = schedule.step if train else schedule.eval
        args = (batch[:, :-1],) if self.has_first_stage else ()
        losses: list[torch.Tensor] = []
        with loss_context(self.mesh):
            if self.has_last_stage:
                run(*args, target=batch[:, 1:], losses=losses)
            else:
                run(*args)
        return self._mean_over_pp(losses)

    def _mean_over_pp(self, losses: list[torch.Tensor]) -> torch.Tensor:
        """The last stage's mean micro-batch loss, summed into every pp rank (the others add zero)."""
        total = torch.zeros((), device=self.device)
        if losses:
            total = torch.stack([as_plain(loss.detach()).float() for loss in losses]).mean()
        dist.all_reduce(total, group=self.pp_mesh.get_group())
        return total


def clip_grad_norm(parameters: list[nn.Parameter], max_norm: float, pp_mesh: DeviceMesh | None) -> torch.Tensor:
    """Clip by the norm over the whole model: under PP each rank holds only its stages' gradients; under
    EP the experts' gradients live on another mesh than the dense ones (norms taken per mesh, combined)."""
    by_mesh: dict[object, list[nn.Parameter]] = {}
    for p in parameters:
        by_mesh.setdefault(p.device_mesh if isinstance(p, DTensor) else None, []).append(p)
    if pp_mesh is None and len(by_mesh) == 1:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm
    squares = []
    for group in by_mesh.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in group if p.grad is not None])
        squares.append((norm.full_tensor() if isinstance(norm, DTensor) else norm).pow(2))
    squared = torch.stack(squares).sum()
    if pp_mesh is not None:
        dist.all_reduce(squared, group=pp_mesh.get_group())
    norm = squared.sqrt()
    for group in by_mesh.values():
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm)
    return norm


def export_from_checkpoint(checkpoint: Path, out_dir: Path) -> Path:
    """The HF export under PP (no rank holds every stage): rank 0 reads the final DCP checkpoint whole."""
    from trainer.export_hf import main as export_main

    if dist.get_rank() == 0:
        export_main(["--checkpoint", str(checkpoint), "--out", str(out_dir)])
    dist.barrier()
    return out_dir
