"""Checkpoints reshard: 4 steps at tp 2 x dp 2 through the CLI, resumed at dp 4 (and on one rank), equal a straight run.

DCP stores every tensor with its global shape, so a checkpoint written as 2-D (dp_shard x tp) DTensor
pieces loads into 1-D FSDP shards or into one process; the data state is one counter of consumed
windows, so the resumed run reads exactly the windows the straight run reads (same global batch:
micro-batch x accumulation x data-parallel degree = 16 windows).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig

pytestmark = pytest.mark.e2e


def _cli(shards: Path, tok: Path, out: Path, *extra: str) -> dict[int, float]:
    args = ["trainer/fsdp_train.py", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out)]
    common = ["--micro-batch", "2", "--log-every", "1", "--lr", "3e-3", "--no-bf16", "--no-verify-shards"]
    torchrun([*args, *common, "--checkpoint-every", "4", *extra], nproc=4, timeout=600)
    return {r["step"]: r["loss"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r}


def _in_process(shards: Path, tok: Path, out: Path, **kw: object) -> dict[int, float]:
    """One rank, the same global batch (2 x 8 accumulated): the reference, or a resume on one process."""
    cfg = TrainConfig(
        shards=shards,
        tokenizer=tok,
        out=out,
        micro_batch=2,
        grad_accum=8,
        optim=OptimConfig(lr=3e-3),
        bf16=False,
        log_every=1,
        max_steps=8,
        export_hf=False,
        verify_shards=False,
        device="cpu",
        **kw,  # type: ignore[arg-type]
    )
    return dict(train(cfg).losses)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, float]]:
    root = tmp_path_factory.mktemp("reshard")
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=200, seq_len=32)
    first = _cli(shards, tok, root / "split", "--tp", "2", "--dp-shard", "2", "--grad-accum", "4", "--max-steps", "4")
    step4 = root / "split" / "checkpoints" / "step_000000004"
    shutil.copytree(step4, root / "one" / "checkpoints" / step4.name)
    rest = _cli(shards, tok, root / "split", "--dp-shard", "4", "--grad-accum", "2", "--resume", "--max-steps", "8")
    one = _in_process(shards, tok, root / "one", resume=True)  # the tp 2 x dp 2 checkpoint on one process
    straight = _in_process(shards, tok, root / "straight")
    return {"first": first, "rest": rest, "one": one, "straight": straight}


def test_cli_logs_step_and_loss_every_step(runs: dict[str, dict[int, float]]) -> None:
    assert sorted(runs["first"]) == [1, 2, 3, 4]
    assert sorted(runs["rest"]) == [1, 2, 3, 4, 5, 6, 7, 8]  # the resumed run appends to the same file


def test_resume_at_another_layout_equals_the_straight_run(runs: dict[str, dict[int, float]]) -> None:
    straight = runs["straight"]
    assert sorted(straight) == list(range(1, 9))
    resumed = [runs["rest"][s] for s in range(1, 9)]
    print("straight", [straight[s] for s in range(1, 9)], "\nresharded", resumed)
    np.testing.assert_allclose(resumed, [straight[s] for s in range(1, 9)], rtol=1e-5, atol=0)


def test_resume_on_one_rank_equals_the_straight_run(runs: dict[str, dict[int, float]]) -> None:
    straight, one = runs["straight"], runs["one"]
    assert sorted(one) == [5, 6, 7, 8]
    np.testing.assert_allclose([one[s] for s in one], [straight[s] for s in one], rtol=1e-5, atol=0)
