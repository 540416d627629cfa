"""A generated suite over the CLIs outside the hand-written table (issue 30): hypothesis draws bad argv and
config values per CLI (`pipelines.inspect`, `trainer.plan`, `evals.run`, `evals.ablate`,
`trainer.export_hf`), and every draw must end in one `error:` line, exit status 2 and nothing written.

CI-sized: a fixed number of examples per CLI, derandomized so a run is reproducible."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipelines.test_containment import _refused
from tests.support.cli import run_cli

SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NON_POSITIVE = st.sampled_from(["0", "-1", "-1000"])
NOT_FINITE = st.sampled_from(["nan", "inf", "-inf"])
BAD_NUMBER = st.one_of(NON_POSITIVE, NOT_FINITE)


@SETTINGS
@given(flag=st.sampled_from(["--gpus", "--mfu", "--params", "--tokens", "--seq-len", "--micro-batch"]), data=st.data())
def test_trainer_plan(tmp_path: Path, flag: str, data: st.DataObject) -> None:
    integer_flags = {"--gpus", "--seq-len", "--micro-batch"}
    value = data.draw(NON_POSITIVE if flag in integer_flags else BAD_NUMBER)
    base = {"--params": "1e9", "--tokens": "2e10", "--gpus": "8", flag: value}
    argv = [f"{name}={v}" for name, v in base.items()]  # "--mfu=-inf": a value, not an option
    _refused(tmp_path, "trainer.plan", argv, flag)


@SETTINGS
@given(flag=st.sampled_from(["--sample", "--limit", "--chars"]), value=NON_POSITIVE)
def test_pipelines_inspect_counts(tmp_path: Path, flag: str, value: str) -> None:
    run = tmp_path / "run"
    (run / "curated").mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text("{}")
    (run / "stats.json").write_text("{}")
    if value == "0" and flag != "--sample":
        return  # 0 is a valid "no limit" for some counts
    _refused(tmp_path, "pipelines.inspect", [str(run), f"{flag}={value}"], flag)


@SETTINGS
@given(pattern=st.sampled_from(["(", "[a-", "*x", "(?P<", "a{2,1}"]))
def test_pipelines_inspect_bad_grep(tmp_path: Path, pattern: str) -> None:
    run = tmp_path / "run"
    (run / "curated").mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text("{}")
    (run / "stats.json").write_text("{}")
    _refused(tmp_path, "pipelines.inspect", [str(run), "--grep", pattern], "--grep")


@SETTINGS
@given(
    case=st.sampled_from(["limit", "batch", "task-missing", "task-unknown", "task-malformed", "model-missing"]),
    value=NON_POSITIVE,
)
def test_evals_run(tmp_path: Path, case: str, value: str) -> None:
    task = tmp_path / "mc.jsonl"
    task.write_text(json.dumps({"context": "a", "choices": ["b", "c"], "gold": 0}) + "\n")
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    argv = {
        "limit": [str(model), "--task", f"mc={task}", "--limit", value],
        "batch": [str(model), "--task", f"mc={task}", "--batch-size", value],
        "task-missing": [str(model), "--task", f"mc={tmp_path / 'none.jsonl'}"],
        "task-unknown": [str(model), "--task", f"zz={task}"],
        "task-malformed": [str(model), "--task", "mc"],
        "model-missing": [str(tmp_path / "no-model"), "--task", f"mc={task}"],
    }[case]
    _refused(tmp_path, "evals.run", [*argv, "--out", str(tmp_path / "out" / "e.json")], "")


SPEC_VALUES = {
    "tokens": st.sampled_from([0, -5, "many", None, [1]]),
    "seeds": st.sampled_from([[], "0", None, [0.5]]),
    "eval_points": st.sampled_from([0, -1, "x"]),
    "datasets": st.sampled_from([[], {}, "x", [{"name": "a"}], [{"name": "../a", "path": "."}]]),
    "tasks": st.sampled_from([[], "x", None]),
    "seq_len": st.sampled_from([0, -1, "long"]),
    "unknown_key": st.just(1),
}


@SETTINGS
@given(key=st.sampled_from(sorted(SPEC_VALUES)), data=st.data())
def test_evals_ablate_spec_values(tmp_path: Path, key: str, data: st.DataObject) -> None:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    spec = {"datasets": [{"name": "a", "path": str(docs)}], "tokens": 100, "tasks": {}}
    spec[key] = data.draw(SPEC_VALUES[key])
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    _refused(tmp_path, "evals.ablate", [str(path), "--out", str(tmp_path / "out")], "")


@SETTINGS
@given(where=st.sampled_from(["same", "inside", "parent", "missing"]))
def test_trainer_export_hf(tmp_path: Path, where: str) -> None:
    checkpoint = tmp_path / "train" / "checkpoints" / "step_3"
    checkpoint.mkdir(parents=True, exist_ok=True)
    out = {"same": checkpoint, "inside": checkpoint / "hf", "parent": tmp_path / "train", "missing": tmp_path / "hf"}
    source = tmp_path / "none" if where == "missing" else checkpoint
    _refused(tmp_path, "trainer.export_hf", ["--checkpoint", str(source), "--out", str(out[where])], "")


def _one_document_run(tmp_path: Path, text: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = tmp_path / "run"
    (run / "curated").mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text("{}")
    (run / "stats.json").write_text("{}")
    rows = [{"id": "1", "url": "https://example.com/", "text": text}]
    pq.write_table(pa.Table.from_pylist(rows), run / "curated" / "part_00000.parquet")
    return run


def test_pipelines_inspect_catastrophic_grep_answers(tmp_path: Path) -> None:
    """`(a+)+$` on 40 a's and a b backtracks 2^40 times in Python's re (a hang); the regex module answers at
    once, and a pattern it cannot shortcut is stopped by --grep-timeout: one line, exit 2, in bounded time."""
    run = _one_document_run(tmp_path, "a" * 40 + "b")
    done = run_cli("pipelines.inspect", str(run), "--grep", "(a+)+$", "--grep-timeout", "2", timeout=120, check=False)
    assert done.returncode == 0 and "no matching documents" in done.stdout, done.stderr
    started = time.monotonic()
    slow = run_cli("pipelines.inspect", str(run), "--grep", "(a|aa)+$", "--grep-timeout", "1", timeout=120,
                   check=False)  # fmt: skip
    print(f"(a|aa)+$ stopped after {time.monotonic() - started:.1f} s: {slow.stderr.strip()}")
    assert slow.returncode == 2 and slow.stdout == "", slow.stdout
    lines = slow.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --grep: '(a|aa)+$' searched one document"), slow.stderr


@SETTINGS
@given(value=st.sampled_from(["0", "-1", "nan", "inf"]))
def test_pipelines_inspect_grep_timeout(tmp_path: Path, value: str) -> None:
    run = _one_document_run(tmp_path, "text")
    _refused(tmp_path, "pipelines.inspect", [str(run), "--grep", "x", f"--grep-timeout={value}"], "--grep-timeout")


ROOMS = ("pipelines", "curate", "filters", "classifiers", "dedup", "tokenizer", "mixtures", "trainer", "evals",
         "common")  # fmt: skip


def _cli_modules() -> list[str]:
    """Every module of the rooms that parses its own argv (found, so that a new CLI is covered too)."""
    root = Path(__file__).resolve().parents[2]
    found = []
    for room in ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            text = path.read_text()
            if "ArgumentParser(" in text and "\ndef main(argv" in text:
                found.append(".".join(path.relative_to(root).with_suffix("").parts))
    return [*found, "trainer.fsdp_train"]


@pytest.mark.parametrize("argv", [["--no-such-flag"], ["--no-such-flag", "x", "y", "z"]])
@pytest.mark.parametrize("module", _cli_modules())
def test_a_usage_error_is_one_line_for_every_cli(tmp_path: Path, module: str, argv: list[str]) -> None:
    """argparse's own errors (an unknown flag, a missing argument) end as every other bad input: one `error:`
    line naming what is wrong and where help is, exit 2, nothing written (argparse printed its usage block)."""
    line = _refused(tmp_path, module, argv, "--help")
    assert "unrecognized arguments" in line or "required" in line, line
