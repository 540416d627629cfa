"""One optimizer step: micro-batch forward/backward with accumulation, clip, AdamW, schedule.

Kept apart from the loop so the CLI, the tests and the benchmark all time and check the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from trainer.config import ModelConfig
from trainer.context_parallel import check_supported, sharded_sequences
from trainer.distributed import DistInfo, all_reduce_mean
from trainer.expert_parallel import check_expert_parallel
from trainer.materialize import build_sharded
from trainer.model import Transformer, lm_loss
from trainer.moe import MoEStepStats, finish_step, set_aux_scale
from trainer.muon import build_muon
from trainer.optim import OptimConfig, build_optimizer
from trainer.parallelize import ACMode, apply_activation_checkpointing, parallelize, set_gradient_sync
from trainer.pipeline_parallel import Pipeline, PPSchedule, clip_grad_norm
from trainer.qk_clip import QKClipStats, check_qk_clip, qk_clip, track_qk_max
from trainer.schedule import build_scheduler
from trainer.stability import Spike, SpikeGuard
from trainer.tensor_parallel import as_plain, loss_context


@dataclass(frozen=True)
class StepOutput:
    """Detached tensors: reading them (`.item()`) is a device sync, so the loop decides when."""

    loss: torch.Tensor
    grad_norm: torch.Tensor
    lr: float
    spike: Spike | None = None  # set when the guard skipped the update
    moe: MoEStepStats | None = None  # router statistics of a MoE model (trainer/moe.py)
    qk: QKClipStats | None = None  # the step's attention logit maxima under MuonClip (trainer/qk_clip.py)


class TrainEngine:
    """Sharded model (built on meta, initialised per shard: `trainer.materialize`), optimizer, LR schedule."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        dist_info: DistInfo,
        optim: OptimConfig,
        total_steps: int,
        *,
        seed: int = 0,
        bf16: bool = True,
        ac: ACMode = "none",
        compile: bool = False,
        pp_schedule: PPSchedule = "1F1B",
        fsdp: bool | None = None,
        document_eot: int | None = None,
        adapt: Callable[[Transformer], None] | None = None,
    ) -> None:
        self.device, self.optim_cfg, self.world_size = dist_info.device, optim, dist_info.world_size
        self.mesh = dist_info.mesh
        check_supported(dist_info.dims.cp, model_cfg, pp=dist_info.dims.pp, document_masking=document_eot is not None)
        if model_cfg.moe_experts and (dist_info.dims.tp > 1 or dist_info.dims.pp > 1):
            raise ValueError("a mixture-of-experts model trains under FSDP / HSDP layouts only (--tp 1 --pp 1)")
        check_expert_parallel(model_cfg.moe_experts, dist_info.dims.ep)
        self.cp = dist_info.dims.cp > 1  # context parallel: each cp rank runs a slice of every sequence
        self.forward_kw = {} if document_eot is None else {"document_eot": document_eot}  # document masking
        param_dtype = torch.bfloat16 if bf16 else None
        # PP: the step runs through a schedule (trainer/pipeline_parallel.py) instead of the loop below
        self.pipeline = Pipeline(self.mesh, self.device, pp_schedule, optim.z_loss) if dist_info.dims.pp > 1 else None
        # One fp32 rank has nothing to shard or reduce: FSDP2 would only add its per-block hooks and
        # DTensor dispatch (~ +375 ops and +9-12 ms a step on the nanoGPT-sized model, issue 17). bf16
        # keeps FSDP2 at one rank too: its mixed-precision policy (bf16 compute, fp32 master weights
        # and reductions) is the maths every run uses.
        self.fsdp = fsdp if fsdp is not None else (dist_info.world_size > 1 or param_dtype is not None)

        def prepare(model: Transformer) -> nn.Module:
            if adapt is not None:  # a change to the meta model before sharding (e.g. trainer.lora's adapters)
                adapt(model)
            if self.fsdp:
                return parallelize(
                    model, dist_info.mesh, ac=ac, compile=compile, param_dtype=param_dtype, pipeline=self.pipeline
                )
            apply_activation_checkpointing(model, ac)
            if compile:  # no FSDP hooks to keep outside the graph: one graph for the whole model
                model.compile(fullgraph=True)  # (embedding, final norm and head fused too: 1.1x per-block)
            return model

        self.model = build_sharded(model_cfg, prepare, self.device, seed)
        if not self.fsdp and model_cfg.tie_embeddings:
            # `to_empty` swaps each parameter for a new tensor, which unties a plain module's shared
            # weight (fully_shard keeps it tied); the replay initialised the embedding, so tie to it.
            self.model.output.weight = self.model.tok_embeddings.weight
        mup = model_cfg.mup_width_mult if model_cfg.mup_base_dim else None  # μP's per-group LRs (trainer/mup.py)
        if optim.optimizer == "muon":
            if dist_info.dims.pp > 1 or dist_info.dims.tp > 1:
                raise ValueError("--optimizer muon runs under FSDP / HSDP layouts only (--tp 1 --pp 1)")
            self.optimizer: torch.optim.Optimizer = build_muon(
                self.model, optim.lr, optim.weight_decay, optim.betas, optim.muon_momentum, mup
            )
        else:
            self.optimizer = build_optimizer(self.model, optim.lr, optim.weight_decay, optim.betas, mup_width_mult=mup)
        if optim.muon_qk_clip:  # MuonClip: the forwards record their logit maxima, `after_update` clips
            check_qk_clip(optim.optimizer, model_cfg, dist_info.dims.cp)
            track_qk_max(self.model, self.device)
        self.scheduler = build_scheduler(
            self.optimizer,
            total_steps,
            optim.warmup_for(total_steps),
            optim.schedule,
            optim.min_lr_ratio,
            optim.wsd_decay_fraction,
        )

    def _to_device(self, batch: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return batch.pin_memory().to(self.device, non_blocking=True)
        return batch

    def _sequences(self, batch: torch.Tensor) -> AbstractContextManager[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, targets) of a (B, T + 1) batch; under CP this rank's slices, inside the ring attention."""
        if self.cp:
            return sharded_sequences(self.mesh, self.model, batch[:, :-1], batch[:, 1:])
        return nullcontext((batch[:, :-1], batch[:, 1:]))

    def train_step(
        self, micro_batches: list[torch.Tensor], guard: SpikeGuard | None = None, loss_scale: float = 1.0
    ) -> StepOutput:
        """Each micro-batch is (B, seq_len + 1) token ids; the loss is the mean over all of them.

        With a `guard`, the update is applied only when it accepts the step's loss and gradient norm
        (a skipped step leaves the parameters and the optimizer state untouched; the schedule still
        advances). `loss_scale` is the spike test hook (`trainer.stability.INJECT_ENV`); 1.0 is a no-op.
        Gradients are left in place after the step (zeroed at the start of the next one) so
        callers can inspect them.
        """
        self.optimizer.zero_grad(set_to_none=True)
        n = len(micro_batches)
        set_aux_scale(self.model, 1.0 / n)  # the MoE auxiliary loss is averaged as the LM loss is
        total = torch.zeros((), device=self.device)
        if self.pipeline is not None:
            total = self.pipeline.forward_backward(micro_batches)
            micro_batches = []  # the schedule ran them
        for i, batch in enumerate(micro_batches):
            set_gradient_sync(self.model, i == n - 1)
            batch = self._to_device(batch)
            with loss_context(self.mesh), self._sequences(batch) as (inputs, targets):  # TP loss; CP ring
                logits = self.model(inputs, **self.forward_kw)
                loss = lm_loss(logits, targets, self.optim_cfg.z_loss) / n
                if loss_scale != 1.0:
                    loss = loss * loss_scale
                loss.backward()
            total += as_plain(loss.detach())
        pp_mesh = self.mesh["pp"] if self.pipeline is not None else None
        grad_norm = clip_grad_norm(list(self.model.parameters()), self.optim_cfg.grad_clip, pp_mesh)
        lr = self.scheduler.get_last_lr()[0]
        mean_loss = all_reduce_mean(total) if self.world_size > 1 else total  # gloo costs ~3 ms a step
        spike = guard.check(float(mean_loss), float(grad_norm)) if guard is not None else None
        if spike is None:
            self.optimizer.step()
        qk = self.after_update(spike is None)
        self.scheduler.step()
        moe = finish_step(self.model, self.world_size)
        return StepOutput(mean_loss, grad_norm.detach(), lr, spike, moe, qk)

    def after_update(self, applied: bool) -> QKClipStats | None:
        """What follows an optimizer step (`applied`) or a skipped one: MuonClip's QK-clip when it is on."""
        if not self.optim_cfg.muon_qk_clip:
            return None
        return qk_clip(self.model, self.optim_cfg.muon_qk_clip, self.world_size, apply=applied)

    @torch.no_grad()
    def evaluate(self, batches: list[torch.Tensor]) -> float:
        """Mean loss over held-out batches, averaged over ranks (every rank has the same count)."""
        if not batches:
            return float("nan")
        if self.pipeline is not None:
            return float(all_reduce_mean(self.pipeline.evaluate(batches)))
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for batch in batches:
            batch = self._to_device(batch)
            with loss_context(self.mesh):
                total += as_plain(lm_loss(self.model(batch[:, :-1], **self.forward_kw), batch[:, 1:]))
        self.model.train()
        return float(all_reduce_mean(total / len(batches)))
