"""One optimizer step: micro-batch forward/backward with accumulation, clip, AdamW, schedule.

Kept apart from the loop so the CLI, the tests and the benchmark all time and check the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import ModelConfig
from trainer.distributed import DistInfo, all_reduce_mean
from trainer.materialize import build_sharded
from trainer.model import lm_loss
from trainer.optim import OptimConfig, build_optimizer
from trainer.parallelize import ACMode, parallelize, set_gradient_sync
from trainer.pipeline_parallel import Pipeline, PPSchedule, clip_grad_norm
from trainer.schedule import build_scheduler
from trainer.tensor_parallel import as_plain, loss_context


@dataclass(frozen=True)
class StepOutput:
    """Detached tensors: reading them (`.item()`) is a device sync, so the loop decides when."""

    loss: torch.Tensor
    grad_norm: torch.Tensor
    lr: float


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
    ) -> None:
        self.device, self.optim_cfg = dist_info.device, optim
        self.mesh = dist_info.mesh
        param_dtype = torch.bfloat16 if bf16 else None
        # PP: the step runs through a schedule (trainer/pipeline_parallel.py) instead of the loop below
        self.pipeline = Pipeline(self.mesh, self.device, pp_schedule, optim.z_loss) if dist_info.dims.pp > 1 else None
        self.model = build_sharded(
            model_cfg,
            lambda model: parallelize(
                model, dist_info.mesh, ac=ac, compile=compile, param_dtype=param_dtype, pipeline=self.pipeline
            ),
            self.device,
            seed,
        )
        self.optimizer = build_optimizer(self.model, optim.lr, optim.weight_decay, optim.betas)
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

    def train_step(self, micro_batches: list[torch.Tensor]) -> StepOutput:
        """Each micro-batch is (B, seq_len + 1) token ids; the loss is the mean over all of them.

        Gradients are left in place after the step (zeroed at the start of the next one) so
        callers can inspect them.
        """
        self.optimizer.zero_grad(set_to_none=True)
        n = len(micro_batches)
        total = torch.zeros((), device=self.device)
        if self.pipeline is not None:
            total = self.pipeline.forward_backward(micro_batches)
            micro_batches = []  # the schedule ran them
        for i, batch in enumerate(micro_batches):
            set_gradient_sync(self.model, i == n - 1)
            batch = self._to_device(batch)
            with loss_context(self.mesh):  # TP: the loss on vocab-sharded logits
                logits = self.model(batch[:, :-1])
                loss = lm_loss(logits, batch[:, 1:], self.optim_cfg.z_loss) / n
                loss.backward()
            total += as_plain(loss.detach())
        pp_mesh = self.mesh["pp"] if self.pipeline is not None else None
        grad_norm = clip_grad_norm(list(self.model.parameters()), self.optim_cfg.grad_clip, pp_mesh)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        return StepOutput(all_reduce_mean(total), grad_norm.detach(), lr)

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
                total += as_plain(lm_loss(self.model(batch[:, :-1]), batch[:, 1:]))
        self.model.train()
        return float(all_reduce_mean(total / len(batches)))
