"""`trainer.export_hf` and `evals.run` lock what they write (issue 30): a second run into the same `--out`
is refused in one line naming the first, instead of mixing one export's weights with another's config
or two reports racing; the lock goes with its holder, and `evals.run` locks its report file alone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from common.lock import FolderLock, file_lock
from tests.support.cli import run_cli
from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-step run of a tiny model: its checkpoint."""
    root = tmp_path_factory.mktemp("locks")
    shards, tok = synthetic_run_inputs(root / "inputs", vocab=96, n_docs=40, seq_len=32)
    cfg = TrainConfig(shards=shards, tokenizer=tok, out=root / "train", micro_batch=2, max_steps=2,
                      checkpoint_every=2, log_every=1, bf16=False, verify_shards=False,
                      optim=OptimConfig(lr=1e-3), device="cpu")  # fmt: skip
    train(cfg)
    return root / "train"


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], lines[0]


@pytest.mark.e2e
def test_export_into_a_folder_being_exported_is_refused(run: Path, tmp_path: Path) -> None:
    checkpoint = sorted((run / "checkpoints").glob("step_*"))[-1]
    out = tmp_path / "hf"
    argv = ["trainer.export_hf", "--checkpoint", str(checkpoint), "--out", str(out)]
    with FolderLock(out, "export_hf"):
        _one_line_exit_2(run_cli(*argv, check=False), f"being written by another export_hf (pid {os.getpid()}")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing of the second export
    run_cli(*argv)  # the lock went with its holder
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


@pytest.mark.e2e
def test_eval_report_being_written_is_refused(run: Path, tmp_path: Path) -> None:
    task = tmp_path / "mc.jsonl"
    task.write_text("".join(json.dumps({"context": f"w{i}", "choices": ["w1 w2", "w3"], "gold": 0}) + "\n"
                            for i in range(1, 5)))  # fmt: skip
    report, other = tmp_path / "reports" / "a.json", tmp_path / "reports" / "b.json"

    def evals(out: Path) -> subprocess.CompletedProcess[str]:
        return run_cli("evals.run", str(run), "--task", f"mc={task}", "--device", "cpu", "--no-progress",
                       "--out", str(out), check=False)  # fmt: skip

    with file_lock(report, "evals.run"):
        _one_line_exit_2(evals(report), f"being written by another evals.run (pid {os.getpid()}")
        assert not report.exists()
        with file_lock(other, "evals.run"):  # another report of the same folder is not locked out
            pass
    done = evals(report)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(report.read_text())["tasks"]["mc"]["n"] == 4
    _one_line_exit_2(evals(tmp_path / "reports"), "is a folder")
