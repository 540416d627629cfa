"""`--log-to tensorboard,wandb`: TensorBoard's own reader, and W&B's run file read with W&B's own record
schema, find the records of metrics.jsonl, once per step after a resume."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
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


def _stopped_and_resumed(tmp_path: Path, sink: str) -> dict[int, float]:
    """A run logging to `sink` stopped at step 4 and resumed to 6; metrics.jsonl's losses by step."""
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=40, seq_len=32)

    def cfg(**kw: object) -> TrainConfig:
        base = {"micro_batch": 4, "log_every": 1, "verify_shards": False, "bf16": False, "export_hf": False,
                "max_steps": 6, "optim": OptimConfig(lr=3e-3), "log_to": sink}  # fmt: skip
        return TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / "run", **{**base, **kw})  # type: ignore[arg-type]

    train(cfg(max_steps=4, checkpoint_every=2))
    train(cfg(resume=True))  # from step 4: steps 5, 6 logged (step 4's own record kept from the first run)
    expected = {r["step"]: r["loss"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r}
    assert sorted(expected) == [1, 2, 3, 4, 5, 6]
    return expected


def test_tensorboard_events_hold_the_metrics_jsonl_losses_once_per_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    expected = _stopped_and_resumed(tmp_path, "tensorboard")
    got = _scalars(tmp_path / "run" / "tensorboard", "loss")
    assert got == pytest.approx(expected, rel=1e-7)  # TensorBoard stores float32
    assert set(_scalars(tmp_path / "run" / "tensorboard", "grad_norm")) == set(expected)


def _log_records(data: bytes) -> Iterator[bytes]:
    """The records of a `.wandb` file: W&B's 7-byte header, then a LevelDB log (32 KiB blocks, chunks with a
    7-byte header: crc32c, length, type; FULL=1 or FIRST..LAST=2..4)."""
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            yield pending
            pending = b""


def _wandb_history(out: Path) -> tuple[set[str], list[dict[str, float]]]:
    """(the run ids, the history rows) of every offline run folder under `out/wandb/`, oldest first."""
    from wandb.proto.wandb_internal_pb2 import Record

    ids, rows = set(), []
    for path in sorted(out.glob("wandb/offline-run-*/run-*.wandb")):
        for data in _log_records(path.read_bytes()):
            record = Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})  # fmt: skip
    return ids, rows


def test_wandb_offline_run_holds_the_metrics_jsonl_losses_once_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    import psutil

    monkeypatch.delenv("WANDB_MODE", raising=False)  # the default: offline, nothing leaves the machine
    expected = _stopped_and_resumed(tmp_path, "wandb")
    ids, rows = _wandb_history(tmp_path / "run")
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 2 and len(ids) == 1  # one run, resumed
    steps = [row["_step"] for row in rows if "loss" in row]
    assert sorted(steps) == sorted(set(steps))  # each step once
    assert {row["_step"]: row["loss"] for row in rows if "loss" in row} == expected  # exact: JSON doubles
    assert not [p for p in psutil.Process().children(recursive=True) if "wandb" in p.name()]  # service stopped


def test_unknown_sink_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="unknown sink"):
        parse_sinks("tensorboard,mlflow")
    assert parse_sinks("tensorboard, wandb") == ["tensorboard", "wandb"]
