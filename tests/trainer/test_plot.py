"""``python -m trainer.plot LOG.jsonl``: curves from the trainer's metrics log, robust to real-life logs.

The log is written here in the trainer's own format (``trainer/fsdp_train.py``: train records with
loss, grad_norm, lr and throughput; separate ``val_loss`` records), including what happens in
practice: a resume that logs steps again (append mode), a line cut by a kill, records lacking keys.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from tests.support.cli import run_cli
from trainer.plot import load_log, main, plot_series


def _train(step: int, total: int = 60) -> dict:
    lr = 3e-4 * min(1.0, step / 10) * 0.5 * (1 + math.cos(math.pi * step / total))
    return {
        "step": step,
        "loss": 2 + 8 * math.exp(-step / 15),
        "grad_norm": 1 / math.sqrt(step),
        "lr": lr,
        "tokens": step * 4096,
        "tokens_per_s": 5e4,
        "mfu": 0.31,
        "peak_mem_gib": 1.5,
    }


def _write_log(path: Path) -> None:
    lines = [json.dumps(_train(s)) for s in range(1, 41)]
    lines += [json.dumps({"step": s, "val_loss": 2.5 + 8 * math.exp(-s / 15)}) for s in (20, 40)]
    lines += [json.dumps({**_train(s), "loss": 99.0}) for s in (31, 32)]  # first attempt, then killed...
    lines.append('{"step": 33, "loss": 2.1, "l')  # ...mid-write
    lines += [json.dumps(_train(s)) for s in range(31, 61)]  # resumed from the step-30 checkpoint
    lines.append(json.dumps({"step": 60, "val_loss": 2.4}))
    lines.append(json.dumps({"step": 61, "loss": float("nan")}))  # a diverged step is not plotted
    lines.append(json.dumps({"loss": 1.0}))  # no step: unusable
    path.write_text("\n".join(lines) + "\n")


def test_load_log_keeps_the_last_record_of_each_step(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    _write_log(log)
    series, bad = load_log(log)
    assert bad == 2
    assert [s for s, _ in series["loss"]] == list(range(1, 61))
    assert dict(series["loss"])[31] == _train(31)["loss"]  # the resumed run's value, not 99
    assert series["val_loss"] == [(20, 2.5 + 8 * math.exp(-20 / 15)), (40, 2.5 + 8 * math.exp(-40 / 15)), (60, 2.4)]
    assert len(series["lr"]) == 60 and "step" not in series


@pytest.mark.e2e
def test_cli_writes_one_panel_per_available_curve(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    _write_log(log)
    proc = run_cli("trainer.plot", str(log), timeout=120)
    out = log.with_suffix(".png")
    assert str(out) in proc.stdout and "2 unreadable lines skipped" in proc.stdout
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size == (1000, 4 * 280)  # loss, lr, grad norm, throughput


def test_missing_keys_drop_their_panels(tmp_path: Path) -> None:
    only_loss = {"loss": [(1, 3.0), (2, 2.5)], "val_loss": []}
    out = plot_series(only_loss, tmp_path / "loss.png")
    with Image.open(out) as img:
        assert img.size == (1000, 280)
    log = tmp_path / "empty.jsonl"
    log.write_text(json.dumps({"step": 1, "note": "no numbers"}) + "\n")
    assert main([str(log), "--out", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()
