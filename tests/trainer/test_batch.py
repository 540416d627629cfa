"""`--global-batch-tokens`: tokens per step -> micro-batch x accumulation x ranks, or a one-line refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.batch import BatchError, BatchShape, resolve_batch
from trainer.distributed import DistInfo
from trainer.fsdp_train import TrainConfig
from trainer.prepare import batch_shape


@pytest.mark.parametrize(
    ("tokens", "seq_len", "world", "max_micro", "expected"),
    [
        (4 * 1024 * 1024, 2048, 64, 8, BatchShape(8, 4)),  # seed 002's ~4M tokens/step on 64 GPUs
        (4 * 1024 * 1024, 4096, 128, 8, BatchShape(8, 1)),
        (768, 64, 1, 12, BatchShape(12, 1)),  # nanoGPT shakespeare_char: 12 x 64
        (768, 64, 1, 8, BatchShape(6, 2)),  # 12 windows, micro <= 8: the largest divisor is 6
        (64 * 7, 64, 1, 4, BatchShape(1, 7)),  # a prime share: micro-batch 1
        (512, 32, 2, 100, BatchShape(8, 1)),
    ],
)
def test_tokens_resolve_to_micro_batch_times_accumulation(
    tokens: int, seq_len: int, world: int, max_micro: int, expected: BatchShape
) -> None:
    shape = resolve_batch(tokens, seq_len, world, max_micro)
    assert shape == expected
    assert shape.micro_batch * shape.grad_accum * world * seq_len == tokens
    assert str(tokens) in shape.describe(seq_len, world)


def test_a_budget_that_does_not_divide_is_a_one_line_error() -> None:
    with pytest.raises(BatchError, match=r"not a multiple of seq_len 64 x 2 ranks = 128; nearest: 768") as err:
        resolve_batch(750, 64, 2, 8)
    assert "\n" not in str(err.value)
    with pytest.raises(BatchError, match=">= 1"):
        resolve_batch(0, 64, 1, 8)


def test_the_config_derives_the_batch_and_refuses_an_explicit_accumulation() -> None:
    base = TrainConfig(shards=Path("s"), tokenizer=Path("t"), out=Path("o"), micro_batch=4)
    info = DistInfo(0, 2, 0, None, None, False)  # type: ignore[arg-type]
    assert batch_shape(base, 32, info.world_size) == BatchShape(4, 1)
    derived = TrainConfig(shards=Path("s"), tokenizer=Path("t"), out=Path("o"), micro_batch=4, global_batch_tokens=768)
    assert batch_shape(derived, 32, 2) == BatchShape(4, 3)
    both = TrainConfig(shards=Path("s"), tokenizer=Path("t"), out=Path("o"), global_batch_tokens=768, grad_accum=2)
    with pytest.raises(BatchError, match="do not give both"):
        batch_shape(both, 32, 2)
