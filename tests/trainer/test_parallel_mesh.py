"""The mesh flags: degrees that multiply to the world, one-line refusals, and what each rank reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.fsdp_train import TrainConfig, parse_args, train
from trainer.mesh import ParallelDims, check_runs_on


def test_default_puts_every_rank_in_dp_shard() -> None:
    assert ParallelDims().resolve(8) == ParallelDims(dp_replicate=1, dp_shard=8, tp=1, pp=1, cp=1)
    dims = ParallelDims(dp_replicate=2, tp=2).resolve(8)
    assert (dims.dp_shard, dims.dp_size, dims.world_size) == (2, 4, 8)


@pytest.mark.parametrize(
    ("dims", "world", "message"),
    [
        (ParallelDims(tp=3), 8, "world size 8 is not a multiple of dp_replicate x tp x pp x cp = 3"),
        (ParallelDims(dp_shard=2, tp=2), 8, "= 4, but the job has 8 ranks"),
        (ParallelDims(tp=0), 8, "--tp must be >= 1"),
    ],
)
def test_degrees_that_do_not_fit_the_world_are_refused_in_one_line(
    dims: ParallelDims, world: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        dims.resolve(world)
    assert "\n" not in str(err.value)


def test_flags_fill_the_degrees() -> None:
    cfg = parse_args(["--shards", "s", "--tokenizer", "t", "--out", "o", "--tp", "2", "--dp-shard", "2"])
    assert ParallelDims.of(cfg) == ParallelDims(dp_replicate=1, dp_shard=2, tp=2, pp=1, cp=1)
    cfg = parse_args(
        ["--shards", "s", "--tokenizer", "t", "--out", "o", "--pp", "2", "--pp-schedule", "Interleaved1F1B"]
    )
    assert (cfg.pp, cfg.pp_schedule, cfg.dp_shard) == (2, "Interleaved1F1B", -1)


def test_context_parallel_on_cpu_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot run on cpu") as err:
        check_runs_on(ParallelDims(dp_shard=1, cp=2), "cpu")
    assert "\n" not in str(err.value)
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=20, seq_len=32)
    with pytest.raises(ValueError, match="context parallel"):
        train(TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / "out", cp=2, device="cpu"))


def test_pipeline_refuses_tied_embeddings_and_tp_refuses_uneven_heads(tmp_path: Path) -> None:
    from trainer.config import get_preset
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.model import Transformer
    from trainer.optim import OptimConfig
    from trainer.tensor_parallel import check_tp_divides

    with pytest.raises(ValueError, match="tensor parallel degree 4 does not divide the model's n_kv_heads"):
        check_tp_divides(Transformer(get_preset("tiny").with_vocab(96)), 4)
    info = init_distributed("cpu")
    try:
        pp_info = replace(info, dims=ParallelDims(dp_shard=1, pp=2))  # the refusal comes before any stage is built
        with pytest.raises(ValueError, match="untied"):
            TrainEngine(get_preset("tiny").with_vocab(96), pp_info, OptimConfig(), 10)
    finally:
        shutdown(info)
