"""`--profile-steps A:B`: one Chrome trace per rank with matmuls and FSDP collectives; the losses do not change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.profiling import parse_steps


def test_parse_steps() -> None:
    assert parse_steps("2:3") == (2, 3) and parse_steps("5:5") == (5, 5)
    for bad in ("3", "a:b", "0:2", "4:2"):
        with pytest.raises(ValueError, match="profile-steps"):
            parse_steps(bad)


def _run(shards: Path, tok: Path, out: Path, *extra: str) -> dict[int, float]:
    args = ["trainer/fsdp_train.py", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out)]
    args += ["--micro-batch", "2", "--log-every", "1", "--max-steps", "4", "--no-export-hf", "--no-verify-shards"]
    torchrun([*args, *extra])
    return {r["step"]: r["loss"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r}


@pytest.mark.e2e
def test_traces_per_rank_hold_matmuls_and_collectives_and_leave_losses_unchanged(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=60, seq_len=32)
    plain = _run(shards, tok, tmp_path / "plain")
    profiled = _run(shards, tok, tmp_path / "profiled", "--profile-steps", "2:3")
    assert profiled == plain
    assert not (tmp_path / "plain" / "profile").exists()  # nothing written without the flag
    for rank in (0, 1):
        trace = tmp_path / "profiled" / "profile" / f"rank{rank}_steps2-3.json"
        names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
        assert "aten::mm" in names
        assert any("all_gather" in n or "allgather" in n for n in names), sorted(names)[:50]
        assert any("reduce_scatter" in n for n in names)
        assert any(n == "[memory]" for n in names)  # profile_memory=True records allocations


def test_oom_snapshot_records_nothing_on_cpu(tmp_path: Path) -> None:
    import torch

    from trainer.profiling import oom_snapshot

    with pytest.raises(RuntimeError, match="boom"), oom_snapshot(True, tmp_path, 0, torch.device("cpu")):
        raise RuntimeError("boom")
    assert not (tmp_path / "profile").exists()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="the allocator snapshot is CUDA's")
def test_a_step_that_runs_out_of_cuda_memory_leaves_a_snapshot_and_reraises(tmp_path: Path) -> None:
    """A real step on a capped allocator: the OOM propagates and OUT/profile/oom_rank0.pickle holds the history."""
    import pickle

    import torch

    from trainer.config import get_preset
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.optim import OptimConfig
    from trainer.profiling import oom_snapshot

    info = init_distributed("cuda")
    try:
        cfg = get_preset("tiny").with_vocab(32768)
        engine = TrainEngine(cfg, info, OptimConfig(), 10, bf16=False)
        total = torch.cuda.get_device_properties(info.device).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 256 * 2**20) / total)
        batch = torch.randint(0, cfg.vocab_size, (64, 513))  # its fp32 logits alone take 4 GiB
        with pytest.raises(torch.OutOfMemoryError), oom_snapshot(True, tmp_path, info.rank, info.device):
            engine.train_step([batch])
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        shutdown(info)
    snapshot = pickle.loads((tmp_path / "profile" / "oom_rank0.pickle").read_bytes())
    assert snapshot["segments"]
    assert any(event["action"] == "oom" for trace in snapshot["device_traces"] for event in trace)
