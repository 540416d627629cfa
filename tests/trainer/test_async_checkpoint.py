"""`--async-checkpoint`: saves written while training goes on, committed only once complete, resumed exactly.

Run as a module (`python -m tests.trainer.test_async_checkpoint MODE ROOT`) this file is the worker of the
kill tests: one gloo rank that commits a checkpoint at step 2, starts an asynchronous save at step 4 whose
write (or whose commit) is held, and goes on training; the test SIGKILLs it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs
from trainer.checkpoint_trust import verify_checkpoint
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig

HELD, TRAINED = "held", "trained_while_held"


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.randn(8, 16)).square().mean().backward()
    optimizer.step()


def _hold_forever(root: Path) -> None:
    (root / HELD).touch()
    time.sleep(3600)


def snapshot_worker(root: Path) -> None:
    """Save step 2 with its write held until three more steps changed the weights in place; the checkpoint
    must hold the step-2 weights (the stager's copy), not the live ones."""
    import threading

    import torch.distributed.checkpoint as dcp

    from trainer.checkpoint import Checkpointer
    from trainer.distributed import init_distributed

    init_distributed("cpu")
    model, optimizer, scheduler = _model_and_optimizer()
    for _ in range(2):
        _step(model, optimizer)
    at_save = {k: v.clone() for k, v in model.state_dict().items()}
    trained = threading.Event()
    write_data = dcp.FileSystemWriter.write_data

    def late_write(self, plan, planner):  # type: ignore[no-untyped-def]
        trained.wait()
        return write_data(self, plan, planner)

    dcp.FileSystemWriter.write_data = late_write  # type: ignore[method-assign]
    ckpt = Checkpointer(root / "checkpoints", keep=2, background=True)
    ckpt.save(2, model, optimizer, scheduler, {"consumed_samples": 2})
    for _ in range(3):
        _step(model, optimizer)
    trained.set()
    ckpt.finish()
    fresh, fresh_optimizer, fresh_scheduler = _model_and_optimizer()
    ckpt.load(root / "checkpoints" / "step_000000002", fresh, fresh_optimizer, fresh_scheduler, {"consumed_samples": 0})
    loaded = fresh.state_dict()
    same = all(torch.equal(loaded[k], at_save[k]) for k in at_save)
    live = all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    (root / "result.json").write_text(json.dumps({"equals_step_2": same, "equals_live": live}))


def resume_worker(root: Path) -> None:
    """After the kill: resume from the latest checkpoint, save the next one (which removes the stale .tmp)."""
    from trainer.checkpoint import Checkpointer
    from trainer.distributed import init_distributed

    init_distributed("cpu")
    model, optimizer, scheduler = _model_and_optimizer()
    ckpt = Checkpointer(root / "checkpoints", keep=2, background=True)
    latest = ckpt.latest()
    assert latest is not None
    data = ckpt.load(latest, model, optimizer, scheduler, {"consumed_samples": 0})
    _step(model, optimizer)
    ckpt.save(3, model, optimizer, scheduler, {"consumed_samples": 3})
    ckpt.finish()
    (root / "resumed.json").write_text(json.dumps({"from": latest.name, "data": data}))


def worker(mode: str, root: Path) -> None:
    """Commit step 2; hold step 4's save at `mode` (write: in the shard write; commit: before the manifest)."""
    import torch.distributed.checkpoint as dcp

    import trainer.checkpoint as checkpoint
    from trainer.distributed import init_distributed

    init_distributed("cpu")
    model, optimizer, scheduler = _model_and_optimizer()
    ckpt = checkpoint.Checkpointer(root / "checkpoints", keep=2, background=True)
    for _ in range(2):
        _step(model, optimizer)
    ckpt.save(2, model, optimizer, scheduler, {"consumed_samples": 2})
    ckpt.finish()
    if mode == "write":
        write_data = dcp.FileSystemWriter.write_data

        def held_write(self, plan, planner):  # type: ignore[no-untyped-def]
            write_data(self, plan, planner)  # this rank's shard files are on disk, .metadata is not
            _hold_forever(root)

        dcp.FileSystemWriter.write_data = held_write  # type: ignore[method-assign]
    else:
        checkpoint.write_checksums = lambda folder: _hold_forever(root)  # type: ignore[assignment]
    ckpt.save(4, model, optimizer, scheduler, {"consumed_samples": 4})
    steps = 0
    while True:  # training goes on while the save is held
        _step(model, optimizer)
        steps += 1
        if (root / HELD).exists():  # written whole, then renamed: the test never reads a half-written count
            (root / f"{TRAINED}.part").write_text(str(steps))
            os.replace(root / f"{TRAINED}.part", root / TRAINED)


@pytest.mark.parametrize("held_in", ["write", pytest.param("commit", marks=pytest.mark.e2e)])
def test_a_kill_during_an_async_save_leaves_the_previous_checkpoint(tmp_path: Path, held_in: str) -> None:
    from trainer.checkpoint import Checkpointer

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "tests.trainer.test_async_checkpoint", held_in, str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / TRAINED).exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / TRAINED).exists(), f"the worker never held its save (exit code {proc.poll()})"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert int((tmp_path / TRAINED).read_text()) >= 1  # steps trained after save() returned, with the write held
    root = tmp_path / "checkpoints"
    assert (root / "step_000000004.tmp").is_dir()  # the interrupted save: shards without a manifest
    assert not (root / "step_000000004.tmp" / "checksums.json").exists()
    latest = Checkpointer(root).latest()
    assert latest == root / "step_000000002"
    verify_checkpoint(latest)  # complete and intact: the resume point
    resume = [sys.executable, "-m", "tests.trainer.test_async_checkpoint", "resume", str(tmp_path)]
    subprocess.run(resume, env=env, check=True, timeout=120)
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed == {"from": "step_000000002", "data": {"consumed_samples": 2}}
    assert sorted(p.name for p in root.iterdir()) == ["step_000000002", "step_000000003"]  # the .tmp went


def _cfg(tmp: Path, out: str, **kw: object) -> TrainConfig:
    shards, tok = tmp / "shards", tmp / "tok" / "tokenizer.json"
    base = {"micro_batch": 4, "log_every": 1, "verify_shards": False, "bf16": False, "export_hf": False,
            "max_steps": 4, "optim": OptimConfig(lr=3e-3), "checkpoint_every": 2}  # fmt: skip
    return TrainConfig(shards=shards, tokenizer=tok, out=tmp / out, **{**base, **kw})  # type: ignore[arg-type]


def _losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r}


def test_async_saves_resume_exactly_like_the_straight_synchronous_run(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=40, seq_len=32)
    assert (shards, tok) == (tmp_path / "shards", tmp_path / "tok" / "tokenizer.json")
    train(_cfg(tmp_path, "sync"))
    train(_cfg(tmp_path, "async", async_checkpoint=True, max_steps=2))
    train(_cfg(tmp_path, "async", async_checkpoint=True, resume=True, keep_checkpoints=1))
    straight, resumed = _losses(tmp_path / "sync"), _losses(tmp_path / "async")
    assert sorted(straight) == [1, 2, 3, 4] and resumed == straight  # bit-identical
    assert sorted(p.name for p in (tmp_path / "sync" / "checkpoints").iterdir()) == ["step_000000002", "step_000000004"]
    assert [p.name for p in (tmp_path / "async" / "checkpoints").iterdir()] == ["step_000000004"]  # kept 1
    state = json.loads((tmp_path / "async/checkpoints/step_000000004/trainer_state.json").read_text())
    assert state["step"] == 4
    verify_checkpoint(tmp_path / "async/checkpoints/step_000000004")


def _torchrun_cli(shards: Path, tok: Path, out: Path, *extra: str) -> dict[int, float]:
    from tests.support.trainer_inputs import torchrun

    flags = ["--micro-batch", "2", "--grad-accum", "2", "--log-every", "1", "--lr", "3e-3", "--no-verify-shards",
             "--checkpoint-every", "2", "--keep-checkpoints", "2"]  # fmt: skip
    torchrun(["trainer/fsdp_train.py", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out),
              *flags, *extra])  # fmt: skip
    return _losses(out)


@pytest.mark.e2e
def test_two_ranks_async_saves_and_resume_equal_the_synchronous_straight_run(tmp_path: Path) -> None:
    """torchrun, 2 gloo ranks: a synchronous epoch vs async saves, stopped at step 4 and resumed; same
    losses bit for bit, same exported weights, the same committed checkpoints."""
    from safetensors.torch import load_file

    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=30, seq_len=32)
    straight = _torchrun_cli(shards, tok, tmp_path / "sync")
    _torchrun_cli(shards, tok, tmp_path / "async", "--async-checkpoint", "--max-steps", "4")
    resumed = _torchrun_cli(shards, tok, tmp_path / "async", "--async-checkpoint", "--resume")
    assert len(straight) >= 6 and resumed == straight
    a, b = load_file(tmp_path / "sync/hf/model.safetensors"), load_file(tmp_path / "async/hf/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for run in ("sync", "async"):
        names = sorted(p.name for p in (tmp_path / run / "checkpoints").iterdir())
        assert len(names) == 2 and not any(n.endswith(".tmp") for n in names)
        verify_checkpoint(tmp_path / run / "checkpoints" / names[-1])


def test_an_async_save_holds_the_weights_of_its_step_while_training_changes_them(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "tests.trainer.test_async_checkpoint", "snapshot", str(tmp_path)]
    subprocess.run(cmd, env=env, check=True, timeout=120)
    assert json.loads((tmp_path / "result.json").read_text()) == {"equals_step_2": True, "equals_live": False}


if __name__ == "__main__":
    if sys.argv[1] == "snapshot":
        snapshot_worker(Path(sys.argv[2]))
    elif sys.argv[1] == "resume":
        resume_worker(Path(sys.argv[2]))
    else:
        worker(sys.argv[1], Path(sys.argv[2]))
