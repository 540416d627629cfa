"""Evaluation tasks (`evals.tasks`: bits per byte, BLiMP, multiple choice) on the sharded model, during training.

`--eval-task NAME=PATH` (repeatable; the names and files of `python -m evals.run --task`) runs every
`--eval-every` steps and at the end, beside the validation loss. Every rank scores its share of the
items (`shard_items`: every world_size-th) through the FSDP2 module itself: its forward all-gathers
one block at a time, as in training, so no rank ever holds the full model. The additive totals of
each task (counts, nats, bytes) are all-reduced and turned into the figures a single process gives
(`evals.run` on the same weights; `tests/trainer/test_eval_tasks.py` checks the equality).

FSDP's forward is a collective: a rank with fewer batches than another runs empty one-token
forwards until both have run as many. The scorer takes the model's full logits (the head cannot be
split off a sharded root), so a batch holds at most `LOGIT_BUDGET` logits. Under bf16 (the default)
the forward runs in bf16 as training does; `--no-bf16` gives fp32, the figures of `evals.run`. Tensor
and pipeline parallel layouts are refused (each rank would hold a slice of every request's logits).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tokenizers import Tokenizer
from torch import nn

from evals.scoring import length_batches, make_scorer
from evals.tasks import Task, headline
from evals.tasks.base import (
    Encoder,
    Request,
    ScoreFn,
    prefix_token,
    shard_items,
    task_totals,
    totals_from_vector,
    totals_vector,
)
from trainer.distributed import DistInfo

log = logging.getLogger(__name__)
LOGIT_BUDGET = 1 << 26  # fp32 logits per forward (256 MiB): batch tokens = budget // vocab


def sharded_scorer(model: nn.Module, device: torch.device, batch_size: int, vocab: int) -> ScoreFn:
    """A ScoreFn through `model` (logits out) that runs the same number of forwards on every rank."""
    max_tokens = max(1, LOGIT_BUDGET // vocab)
    score = make_scorer(model, device, batch_size=batch_size, max_batch_tokens=max_tokens)

    def collective(requests: Sequence[Request]) -> list[float]:
        mine = len(length_batches(requests, batch_size, max_tokens))
        most = torch.tensor([mine], device=device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(most, op=dist.ReduceOp.MAX)
        out = score(requests)
        with torch.inference_mode():
            for _ in range(int(most) - mine):  # keep FSDP's per-block all-gathers in step with the others
                model(torch.zeros(1, 1, dtype=torch.long, device=device))
        return out

    return collective


@dataclass
class TaskEvaluator:
    """The run's tasks, its encoder and a collective scorer over the sharded model."""

    tasks: dict[str, Task]
    encoder: Encoder
    info: DistInfo
    limit: int | None
    batch_size: int

    @classmethod
    def build(
        cls,
        tasks: dict[str, Task],
        info: DistInfo,
        tokenizer_file: Path,
        ids: tuple[int | None, int | None],
        context_len: int,
        limit: int | None = None,
        batch_size: int = 16,
    ) -> TaskEvaluator:
        """The loaded `tasks` (`evals.tasks.load_tasks`, before any work) with the run's encoder; `ids` = (bos,
        eos) of the shards."""
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        prefix = prefix_token(tokenizer, Path(tokenizer_file).parent, *ids)
        return cls(tasks, Encoder(tokenizer, prefix, context_len), info, limit, batch_size)

    def run(self, model: nn.Module, vocab: int) -> dict[str, dict[str, Any]]:
        """Every task on the sharded model: {name: the metrics `evals.run` reports}. Collective."""
        score = sharded_scorer(model, self.info.device, self.batch_size, vocab)
        was_training = model.training
        model.eval()
        results = {}
        for name, task in self.tasks.items():
            items = shard_items(len(task), self.info.rank, self.info.world_size, self.limit, task.limit_takes_prefix)
            totals = task_totals(task, self.encoder, score, items)  # also with no items: the forwards are collective
            vector = torch.tensor(totals_vector(task, totals), dtype=torch.float64, device=self.info.device)
            if self.info.world_size > 1:
                dist.all_reduce(vector)
            results[name] = task.metrics(totals_from_vector(task, vector.tolist()))
        reshard(model)
        model.train(was_training)
        return results


def reshard(model: nn.Module) -> None:
    """Free what evaluation left gathered (the root and the last block keep theirs after a forward)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def eval_record(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What `metrics.jsonl` gets: the headline numbers flat (for `trainer.plot`) and every task's metrics."""
    return {**headline(results), "tasks": results}
