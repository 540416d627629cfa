"""`--max-steps` cuts the epoch; `--schedule-span max_steps` makes the LR schedule end there too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.fsdp_train import TrainConfig, train
from trainer.loop import schedule_steps
from trainer.optim import OptimConfig


def test_schedule_steps() -> None:
    cfg = TrainConfig(shards=Path("s"), tokenizer=Path("t"), out=Path("o"), max_steps=5)
    assert schedule_steps(cfg, 100) == 100
    cfg.schedule_span = "max_steps"
    assert schedule_steps(cfg, 100) == 5 and schedule_steps(cfg, 3) == 3
    cfg.max_steps = None
    with pytest.raises(ValueError, match="needs --max-steps"):
        schedule_steps(cfg, 100)


def test_a_short_run_decays_fully_when_the_schedule_follows_max_steps(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=60, seq_len=32)
    optim = OptimConfig(lr=1e-2, warmup_steps=1, min_lr_ratio=0.1)
    base = {"micro_batch": 4, "optim": optim, "max_steps": 4, "log_every": 1, "export_hf": False}
    lrs = {}
    for span in ("epoch", "max_steps"):
        cfg = TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / span, schedule_span=span, **base)  # type: ignore[arg-type]
        result = train(cfg)
        assert result.steps_done == 4 and result.epoch_steps > 4
        lrs[span] = [r for r in (tmp_path / span / "metrics.jsonl").read_text().splitlines() if '"lr"' in r]
    last = {span: json.loads(lines[-1])["lr"] for span, lines in lrs.items()}
    assert last["max_steps"] == pytest.approx(1e-3)  # the 4th update runs at the floor: 10 % of peak
    assert last["epoch"] > 5e-3  # the epoch-long cosine has barely moved
