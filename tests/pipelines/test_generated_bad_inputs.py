"""A generated suite over the CLIs outside the hand-written table (issue 30): hypothesis draws bad argv and
config values per CLI (`pipelines.inspect`, `trainer.plan`, `evals.run`, `evals.ablate`,
`trainer.export_hf`), and every draw must end in one `error:` line, exit status 2 and nothing written.

Absurd but well-formed numbers, for every numeric flag of every CLI (found from the CLI's own parser) and
the numbers of recipes, mixture specs, model files and ablation specs: NaN, infinities, 2**64, a value just
outside the flag's range; each is refused in one line naming the flag and its range.

CI-sized: a fixed number of examples per CLI, derandomized so a run is reproducible."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from common.cli import Bounded
from tests.pipelines.test_containment import SAMPLE, _refused
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
    "tokens": st.sampled_from([0, -5, "many", None, [1], 2**64]),
    "seeds": st.sampled_from([[], "0", None, [0.5], [-1], [2**64]]),
    "eval_points": st.sampled_from([0, -1, "x", 10**9]),
    "decision_window": st.sampled_from([0, -1, 1.5, 2**64]),
    "checkpoint_average": st.sampled_from([0, -1, "x", 2**64]),
    "limit": st.sampled_from([0, -1, 1.5, {"mc": 0}, {"mc": 2**64}]),
    "max_repetition": st.sampled_from([0, -1, 1e30, 2**64]),
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


class _Parsed(Exception):
    """Raised in place of parsing: it carries the parser a CLI built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(module: str) -> argparse.ArgumentParser:
    """The parser `module.main` builds (main is stopped where it would parse its argv)."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign,assignment]
    try:
        importlib.import_module(module).main([])
    except _Parsed as parsed:
        return parsed.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise AssertionError(f"{module}.main returned without parsing")


NUMERIC_FLAGS = {
    module: {action.option_strings[-1]: (action.type, action.nargs) for action in _parser_of(module)._actions
             if action.option_strings and not action.choices
             and (action.type in (int, float) or isinstance(action.type, Bounded))}
    for module in _cli_modules()
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(NUMERIC_FLAGS))
def test_every_numeric_flag_has_a_range_shown_in_help(module: str) -> None:
    """A numeric flag without a range takes 1e30 or 2**64 and runs with it; each one's range is in --help, and
    its closed ends are values the flag takes."""
    unbounded = [flag for flag, (kind, _) in NUMERIC_FLAGS[module].items() if not isinstance(kind, Bounded)]
    assert not unbounded, f"{module}: numeric flags without a range: {unbounded}"
    shown = " ".join(_parser_of(module).format_help().split())
    for flag, (kind, _) in NUMERIC_FLAGS[module].items():
        assert f"(range {kind.range})" in shown, (module, flag)
        ends = [end for end, open_ in ((kind.low, kind.open_low), (kind.high, kind.open_high)) if not open_]
        assert all(kind(str(kind.kind(end))) == end for end in ends), (module, flag)


def _outside(kind: Bounded) -> st.SearchStrategy[str]:
    """Well-formed values outside `kind`'s range, as a user would type them."""
    specials = ["nan", "inf", "-inf", "1e30", str(2**64), str(-(2**64))]
    if kind.kind is int:
        below = st.integers(max_value=int(kind.low) - (0 if kind.open_low else 1), min_value=-(2**70))
        above = st.integers(min_value=int(kind.high) + (0 if kind.open_high else 1), max_value=2**70)
        return st.one_of(st.sampled_from([*specials, "1.5", "0x10"]), below.map(str), above.map(str))
    below = st.floats(max_value=kind.low, exclude_max=not kind.open_low, allow_nan=False)
    above = st.floats(min_value=kind.high, exclude_min=not kind.open_high, allow_nan=False)
    return st.one_of(st.sampled_from(specials), below.map(repr), above.map(repr))


@settings(SETTINGS, max_examples=12)
@given(data=st.data())
@pytest.mark.parametrize("module", sorted(m for m, flags in NUMERIC_FLAGS.items() if flags))
def test_an_absurd_number_is_refused_by_every_cli(tmp_path: Path, module: str, data: st.DataObject) -> None:
    """`--cpus 1e30`, `--shard-block-kb 2**64`, `--lr nan`: refused while argv is parsed, before any work,
    in one line naming the flag and its range (exit 2, nothing written)."""
    flag = data.draw(st.sampled_from(sorted(NUMERIC_FLAGS[module])), label="flag")
    kind, nargs = NUMERIC_FLAGS[module][flag]
    value = data.draw(_outside(kind), label="value")
    argv = [f"{flag}={value}"]
    if isinstance(nargs, int) and nargs > 1:  # --betas B1 B2: values apart, so one that looks like an option cannot
        assume(not value.startswith("-") or re.fullmatch(r"-\d+|-\d*\.\d+", value))
        argv = [flag, *[str(kind.kind((kind.low + kind.high) / 2))] * (nargs - 1), value]
    line = _refused(tmp_path, module, argv, f"argument {flag}:")
    assert kind.range in line or "invalid" in line, line


@pytest.mark.parametrize(
    ("module", "argv", "flag"),
    [
        ("pipelines.plan", ["sample", "--cpus", str(2**64)], "--cpus"),
        ("pipelines.plan", ["sample", "--mem-per-cpu", "1e30"], "--mem-per-cpu"),
        ("pipelines.plan", ["sample", "--price", "1e30"], "--price"),
        ("pipelines.plan", ["sample", "--pages-per-warc", "1e30"], "--pages-per-warc"),
        ("trainer.fsdp_train", ["--shard-block-kb", str(1 << 30)], "--shard-block-kb"),
        ("trainer.fsdp_train", ["--shard-cache-mb", str(2**64)], "--shard-cache-mb"),
    ],
)
def test_the_audits_absurd_numbers_are_refused(tmp_path: Path, module: str, argv: list[str], flag: str) -> None:
    """The audit's cases: each was accepted (a 1 GiB block read whole files per request)."""
    line = _refused(tmp_path, module, argv, f"argument {flag}:")
    assert "outside the allowed range" in line, line


MODEL = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 128, "moe_experts": 4}
CONFIG_VALUES = st.sampled_from([float("nan"), float("inf"), float("-inf"), 2**64, -(2**64), 1e300])


@SETTINGS
@given(
    case=st.sampled_from([
        ("recipe", "extraction", "timeout"), ("recipe", "signals", "timeout"),
        ("recipe", "extraction", "max_html_bytes"), ("recipe", "decontamination", "n_grams"),
        ("recipe", "rules.gopher_quality", "max_word_count"), ("recipe", "signals.c4", "max_word_length"),
        ("recipe", "dedup", "bff_expected_ngrams"),
        ("mixture", "", "workers"), ("mixture", "", "seed"), ("mixture", "", "tokens_per_file"),
        ("mixture", "", "target_tokens"), ("mixture", "sources", "weight"), ("mixture", "sources", "max_repetition"),
        ("model", "", "moe_experts"), ("model", "", "moe_capacity"), ("model", "", "init_std"),
        ("model", "", "norm_eps"), ("model", "", "rope_theta"), ("model", "", "moe_ffn_dim"),
    ]),
    value=CONFIG_VALUES,
)  # fmt: skip
def test_an_absurd_config_number_is_refused(tmp_path: Path, case: tuple[str, str, str], value: float) -> None:
    """The same for numbers in config files: a recipe's page timeout of 2**64 s, a mixture built by 2**64
    workers or from a weight of 1e300 (which summed to inf), a model of 2**64 experts: one line naming the key."""
    kind, section, key = case
    path = tmp_path / "config.yaml"
    if kind == "recipe":
        recipe: dict = {"name": "absurd"}
        node = recipe
        for part in section.split("."):
            node = node.setdefault(part, {})
        node[key] = value
        argv, module = ["sample", "--recipe", str(path)], "pipelines.plan"
        config: dict = recipe
    elif kind == "mixture":
        source = {"name": "web", "path": str(tmp_path / "docs"), "weight": 1}
        config = {"tokenizer": str(tmp_path / "tok"), "target_tokens": 1000, "seq_len": 64, "sources": [source]}
        (source if section else config)[key] = value
        argv, module = [str(path), "--out", str(tmp_path / "out"), "--quiet"], "mixtures.build"
    else:
        config = {**MODEL, key: value}
        argv, module = [SAMPLE, "--out", str(tmp_path / "out"), "--train", "--model", str(path)], "pipelines.run"
    path.write_text(json.dumps(config).replace("NaN", ".nan").replace("-Infinity", "-.inf").replace("Infinity", ".inf"))
    _refused(tmp_path, module, argv, key)
