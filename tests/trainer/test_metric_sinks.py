"""`--log-to tensorboard`: TensorBoard's own reader finds the records of metrics.jsonl, once per step after a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs
from trainer.fsdp_train import TrainConfig, train
from trainer.metric_sinks import parse_sinks
from trainer.optim import OptimConfig


def _scalars(logdir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    assert len({e.step for e in events}) == len(events), f"{tag}: a step logged twice"
    return {e.step: e.value for e in events}


def test_tensorboard_events_hold_the_metrics_jsonl_losses_once_per_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=40, seq_len=32)

    def cfg(**kw: object) -> TrainConfig:
        base = {"micro_batch": 4, "log_every": 1, "verify_shards": False, "bf16": False, "export_hf": False,
                "max_steps": 6, "optim": OptimConfig(lr=3e-3), "log_to": "tensorboard"}  # fmt: skip
        return TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / "run", **{**base, **kw})  # type: ignore[arg-type]

    train(cfg(max_steps=4, checkpoint_every=2))
    train(cfg(resume=True))  # from step 4: steps 5, 6 logged (step 4's own record kept from the first run)
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    expected = {r["step"]: r["loss"] for r in records}
    assert sorted(expected) == [1, 2, 3, 4, 5, 6]
    got = _scalars(tmp_path / "run" / "tensorboard", "loss")
    assert got == pytest.approx(expected, rel=1e-7)  # TensorBoard stores float32
    assert set(_scalars(tmp_path / "run" / "tensorboard", "grad_norm")) == set(expected)


def test_unknown_sink_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="unknown sink"):
        parse_sinks("tensorboard,mlflow")
