"""`python -m evals.run`: the JSON it writes, the model folders it accepts and its one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evals.run import main
from tests.evals.helpers import MC_EXAMPLE, REPO, blimp_spread, write_jsonl


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "evals.run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def task_files(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("evals-cli")
    blimp = write_jsonl(blimp_spread(120), root / "blimp.jsonl")
    held_out = root / "held_out"
    held_out.mkdir()
    (held_out / "a.txt").write_text(tiny_model.unseen[0][:3000], encoding="utf-8")
    write_jsonl([{"text": t[:2000]} for t in tiny_model.unseen[1:3]], held_out / "b.jsonl")
    return {"blimp": blimp, "bpb": held_out, "mc": MC_EXAMPLE}


def tasks_args(files: dict) -> list[str]:
    return [f"--task={k}={v}" for k, v in files.items()]


@pytest.mark.e2e
def test_cli_writes_the_documented_json(tiny_model, task_files, tmp_path) -> None:
    out = tmp_path / "eval.json"
    proc = cli(str(tiny_model.hf_dir), *tasks_args(task_files), "--batch-size", "16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["model"] == str(tiny_model.hf_dir)
    tasks = report["tasks"]
    assert set(tasks["blimp"]) == {"accuracy", "n", "by_field", "by_paradigm"} and tasks["blimp"]["n"] == 120
    assert set(tasks["bpb"]) == {"bits_per_byte", "bytes", "tokens"}
    assert tasks["bpb"]["bytes"] == sum(len(p.read_text().encode()) for p in [task_files["bpb"] / "a.txt"]) + sum(
        len(json.loads(line)["text"].encode()) for line in (task_files["bpb"] / "b.jsonl").read_text().splitlines()
    )
    assert set(tasks["mc"]) == {"acc", "acc_norm", "n", "gold_prob", "gold_bpb"} and tasks["mc"]["n"] == 12
    assert "GPT-2" not in proc.stdout  # the reference table needs models_summary.jsonl beside the pairs
    assert "blimp: accuracy" in proc.stdout


def test_trainer_output_and_checkpoint_give_the_hf_folder_results(tiny_model, task_files, tmp_path, capsys) -> None:
    """The trainer's --out folder resolves to its hf/; a step_* checkpoint runs from DCP with the same weights."""
    step = sorted((tiny_model.train_dir / "checkpoints").glob("step_*"))[-1]
    reports = []
    for i, model in enumerate([tiny_model.hf_dir, tiny_model.train_dir, step]):
        out = tmp_path / f"{i}.json"
        assert main([str(model), *tasks_args(task_files), "--out", str(out), "--no-progress"]) == 0
        reports.append(json.loads(out.read_text())["tasks"])
    assert reports[0] == reports[1]
    for name in ("blimp", "mc"):
        assert reports[2][name] == reports[0][name]
    assert reports[2]["bpb"]["bits_per_byte"] == pytest.approx(reports[0]["bpb"]["bits_per_byte"], abs=1e-6)


def test_limit_and_the_reference_table(tiny_model, tmp_path, capsys) -> None:
    from tests.evals.conftest import shared_or_skip

    blimp = shared_or_skip("blimp", "blimp.jsonl.gz")
    out = tmp_path / "eval.json"
    assert main([str(tiny_model.hf_dir), f"--task=blimp={blimp}", "--limit", "50", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["tasks"]["blimp"]["n"] == 50
    printed = capsys.readouterr().out
    assert "GPT-2" in printed and "5-gram" in printed and "chance 50.0 %" in printed


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda m, t: ["/no/such/model", f"--task=mc={MC_EXAMPLE}"], "does not exist"),
        (lambda m, t: [m, "--task=hellaswag=x.jsonl"], "unknown task 'hellaswag'"),
        (lambda m, t: [m, f"--task=bpb={t / 'no_text.jsonl'}"], "no string `text` field"),
        (lambda m, t: [m, f"--task=bpb={t / 'no_text.parquet'}"], "no `text` column"),
        (lambda m, t: [m, f"--task=mc={t / 'empty.jsonl'}"], "is empty"),
        (lambda m, t: [m, f"--task=bpb={t / 'empty_dir'}"], "holds no"),
        (lambda m, t: [m], "no --task"),
        (lambda m, t: [m, "--task", "blimp"], "NAME=PATH"),
    ],
)
def test_bad_input_is_a_one_line_error(tiny_model, tmp_path, capsys, make_args, message) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "no_text.jsonl").write_text('{"body": "x"}\n')
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "no_text.parquet")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "empty_dir").mkdir()
    assert main(make_args(str(tiny_model.hf_dir), tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_exit_code_and_help() -> None:
    proc = cli("/no/such/model", f"--task=mc={MC_EXAMPLE}")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: model /no/such/model does not exist"
    proc = cli("--help")
    assert proc.returncode == 0 and "--task NAME=PATH" in proc.stdout and "--batch-size" in proc.stdout
