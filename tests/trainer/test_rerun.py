"""A rerun never erases a run: an `--out` holding a finished run (or other files) is refused under real torchrun
unless `--resume` or `--overwrite` says what to do; `--overwrite` removes the previous run's outputs only;
`--help` gives every flag a text and its default."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from common.atomic import FILE_MODE
from tests.support.cli import REPO
from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.rerun import RUN_OUTPUTS, OutputInUse, check_output, clear_outputs
from trainer.train_config import HELP, TrainConfig, _flag_fields, parse_args

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _launch(flags: list[str]) -> subprocess.CompletedProcess[str]:
    """`python -m trainer.launch` (torchrun, failures cut to the ranks' line) with two gloo ranks."""
    cmd = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py"]
    return subprocess.run([*cmd, *flags], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def test_every_flag_has_a_text_and_its_default_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert {name for name, _, _ in _flag_fields()} == set(HELP)
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "--checkpoint-every CHECKPOINT_EVERY" in text and "(default: 100)" in text
    assert "(default: cosine)" in text and "(default: None)" not in text
    assert TrainConfig(Path("s"), Path("t"), Path("o")).checkpoint_every > 0  # a killed run keeps its progress


def test_check_output_names_what_is_there(tmp_path: Path) -> None:
    check_output(tmp_path / "new", resume=False, overwrite=False)  # absent: a fresh run
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".lock").write_text("{}")  # a run that died before writing anything
    check_output(tmp_path / "empty", resume=False, overwrite=False)
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000000004").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 4}\n')
    stopped = r"holds a stopped training run \(2 metrics records, last checkpoint step_000000004\); pass --resume"
    with pytest.raises(OutputInUse, match=stopped):
        check_output(run, resume=False, overwrite=False)
    check_output(run, resume=True, overwrite=False)
    with pytest.raises(OutputInUse, match="exclude each other"):
        check_output(run, resume=True, overwrite=True)
    (run / "notes.txt").write_text("mine")
    assert clear_outputs(run) == ["metrics.jsonl", "checkpoints"]
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # only the run's outputs go
    with pytest.raises(OutputInUse, match=r"holds 1 other entries \(notes.txt\); pass --overwrite"):
        check_output(run, resume=False, overwrite=False)
    assert set(RUN_OUTPUTS) >= {"metrics.jsonl", "checkpoints", "hf", "run_config.json"}


@pytest.mark.e2e
def test_rerun_into_a_finished_run_is_refused_and_overwrite_replaces_it(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=40, seq_len=32)
    out = tmp_path / "train"
    flags = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(out), "--micro-batch", "2",
             "--log-every", "1"]  # fmt: skip
    torchrun(["trainer/fsdp_train.py", *flags])
    finished = (out / "metrics.jsonl").read_bytes()
    steps = max(r["step"] for r in read_jsonl(out / "metrics.jsonl"))
    assert (out / "hf" / "config.json").is_file() and steps > 1

    again = _launch([*flags, "--max-steps", "1"])  # the same command again: nothing of the run may go
    assert again.returncode == 2, again.stderr[-3000:]
    assert again.stderr.count("\n") == 1 and again.stderr.startswith("error: "), again.stderr
    assert f"{out} holds a finished training run (" in again.stderr and "--resume" in again.stderr
    assert (out / "metrics.jsonl").read_bytes() == finished and (out / "hf" / "config.json").is_file()

    (out / "notes.txt").write_text("kept")
    replaced = _launch([*flags, "--max-steps", "1", "--overwrite"])
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000000001"]
    assert not (out / "hf").exists() and (out / "notes.txt").read_text() == "kept"

    resumed = _launch([*flags, "--resume"])  # continues the replaced run to the end of its epoch
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "loss" in r] == list(range(1, steps + 1))
    assert (out / "hf" / "config.json").is_file()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (out / "hf").iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == FILE_MODE, modes  # was 0600: others can read it
