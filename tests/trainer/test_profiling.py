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
