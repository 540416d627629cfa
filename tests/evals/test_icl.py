"""llm-foundry ICL tasks and the CORE suite: prompts, few-shot draw, counts against an independent scorer,
the centred score, shards, and one-line errors on bad input."""

from __future__ import annotations

import gzip
import json
import math
import random

import pytest

from evals.models import load_model
from evals.run import main
from evals.tasks import TaskDataError, evaluate, load_task, load_tasks
from evals.tasks.base import shard_items, task_totals, totals_from_vector, totals_vector
from evals.tasks.icl import InContextTask, render_prompts
from tests.evals.conftest import shared_or_skip
from tests.support.icl_reference import ReferenceIcl

MC = [{"query": f"Q{i}?", "choices": [f"a{i}", f"b{i}", f"c{i}"], "gold": i % 3} for i in range(30)]


def core_rows(file: str) -> list[dict]:
    path = shared_or_skip("core_tasks", file)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_fewshot_draw_is_nanochats_and_never_the_item() -> None:
    task = InContextTask("t", "multiple_choice", MC, num_fewshot=5, delimiter="\nAnswer: ")
    for item in (0, 7, 29):
        others = [r for i, r in enumerate(MC) if i != item]
        expected = random.Random(1234 + item).sample(others, 5)
        shots = "".join(f"{r['query']}\nAnswer: {r['choices'][r['gold']]}\n\n" for r in expected)
        assert task.shots(item) == shots
        assert MC[item]["query"] not in shots
    prompts = render_prompts("multiple_choice", MC[3], "\nAnswer: ", task.shots(3))
    assert [p.rsplit("\n\n", 1)[1] for p in prompts] == ["Q3?\nAnswer: a3", "Q3?\nAnswer: b3", "Q3?\nAnswer: c3"]


def test_prompts_of_schema_and_language_modeling() -> None:
    schema = {"context_options": ["The cat", "The dog"], "continuation": "barked.", "gold": 1}
    assert render_prompts("schema", schema, " ", "") == ["The cat barked.", "The dog barked."]
    lm = {"context": "  Hello there ", "continuation": "world"}
    assert render_prompts("language_modeling", lm, "\nAnswer: ", "X\n\n") == [
        "X\n\nHello there\nAnswer:",
        "X\n\nHello there\nAnswer: world",
    ]


@pytest.fixture(scope="module")
def ours(tiny_model):
    return load_model(tiny_model.hf_dir, backend="ours", device="cpu")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("file", "kind", "shots", "delimiter"),
    [
        ("arc_easy.jsonl.gz", "multiple_choice", 10, "\nAnswer: "),
        ("winogrande.jsonl.gz", "schema", 0, " "),
        ("lambada_openai.jsonl.gz", "language_modeling", 0, " "),
        ("bigbench_operators.jsonl.gz", "language_modeling", 10, " "),
    ],
)
def test_right_answers_equal_an_independent_scorer(ours, tiny_model, file, kind, shots, delimiter) -> None:
    rows = core_rows(file)
    items = list(range(0, len(rows), max(1, len(rows) // 24)))[:24]
    task = InContextTask(file, kind, rows, shots, delimiter)
    mine, theirs = right_answers(ours, tiny_model, task, rows, items)
    print(f"{file}: {sum(mine)} of {len(items)} right, reference {sum(theirs)}")
    assert mine == theirs


def right_answers(ours, tiny_model, task: InContextTask, rows, items) -> tuple[list[bool], list[bool]]:
    """Per item: right by our task and scorer, right by the independent reference scorer."""
    score = ours.scorer(batch_size=16)
    reqs = task.requests(ours.encoder, items)
    mine = [task.tally(i, score(r))["acc"] == 1.0 for i, r in zip(items, reqs, strict=True)]
    ref = ReferenceIcl(tiny_model.hf_dir, ours.encoder.prefix_id, ours.encoder.context_len)
    return mine, [ref.correct(task.kind, rows, i, task.num_fewshot, task.delimiter) for i in items]


def test_greedy_exact_match_on_text_the_model_has_seen(ours, tiny_model) -> None:
    """The tiny model gets no CORE continuation right, so exact match is checked where it has some: the next
    word of its training text (3-shot, so the few-shot path is exercised too)."""
    words = tiny_model.memorised[0].split(" ")
    rows = [{"context": " ".join(words[max(0, j - 30) : j]), "continuation": words[j]} for j in range(30, 430, 10)]
    rows = [r for r in rows if r["continuation"].strip()]
    task = InContextTask("memorised", "language_modeling", rows, 3, " ")
    mine, theirs = right_answers(ours, tiny_model, task, rows, list(range(len(rows))))
    print(f"memorised next words: {sum(mine)} of {len(rows)} right, reference {sum(theirs)}")
    assert mine == theirs
    assert 0 < sum(mine) < len(rows)


def test_core_suite_centres_and_adds_across_shards(ours) -> None:
    folder = shared_or_skip("core_tasks")
    suite = load_task("core", folder)
    assert suite.missing == ["hellaswag_zeroshot", "hellaswag", "squad", "coqa"]
    assert len(suite.tasks) == 18 and "siqa" not in [t.name for t in suite.tasks]
    score = ours.scorer(batch_size=32)
    whole = evaluate(suite, ours.encoder, score, limit=54)
    assert whole["n_tasks"] == 18 and all(r["n"] == 3 for r in whole["tasks"].values())
    for name, r in whole["tasks"].items():
        b1, b2 = suite.baselines[name]
        assert r["centered"] == pytest.approx((r["acc"] - b1) / (1 - b1))
        assert r["centered_v2"] == pytest.approx((r["acc"] - b2) / (1 - b2))
    assert whole["core"] == pytest.approx(sum(r["centered"] for r in whole["tasks"].values()) / 18)
    assert 0 < whole["gold_prob"] < 1 and whole["gold_bpb"] > 0
    shards = [
        task_totals(suite, ours.encoder, score, shard_items(len(suite), r, 2, 54, suite.limit_takes_prefix))
        for r in range(2)
    ]
    summed = [a + b for a, b in zip(*(totals_vector(suite, s) for s in shards), strict=True)]
    merged = suite.metrics(totals_from_vector(suite, summed))
    assert merged["core"] == pytest.approx(whole["core"], abs=1e-12)
    assert merged["tasks"]["copa"]["gold_prob"] == pytest.approx(whole["tasks"]["copa"]["gold_prob"], abs=1e-12)


def test_fineweb_suite_names_what_is_missing() -> None:
    suite = load_task("fineweb", shared_or_skip("core_tasks"))
    assert sorted(t.name for t in suite.tasks) == sorted(
        ["arc_easy", "arc_challenge", "commonsense_qa", "openbook_qa", "piqa", "siqa", "winogrande"]
    )
    assert sorted(suite.missing) == ["hellaswag", "mmlu_fewshot"]


def test_gold_probability_is_a_softmax_over_the_choices() -> None:
    task = InContextTask("t", "multiple_choice", MC[:3])
    task._scored[0] = ([1, 2, 1], 3)
    tally = task.tally(0, [-1.0, -1.5, -3.0])  # gold 0; mean log-probs -1, -0.75, -3: acc picks 1
    assert tally["acc"] == 0.0
    assert tally["gold_prob"] == pytest.approx(math.exp(-1) / (math.exp(-1) + math.exp(-1.5) + math.exp(-3)))


@pytest.mark.parametrize(
    ("rows", "kind", "shots", "message"),
    [
        ([{"context": "a", "continuation": "b"}], "multiple_choice", 0, "not a multiple_choice row"),
        ([{"query": "q", "choices": ["x", "y"], "gold": 2}], "multiple_choice", 0, "not a multiple_choice row"),
        ([{"query": "q", "choices": ["x", "y"], "gold": 0}], "schema", 0, "not a schema row"),
        (MC[:4], "multiple_choice", 4, "4-shot needs 4 example rows besides the item"),
        (MC[:4], "ranking", 0, "unknown icl_task_type"),
    ],
)
def test_bad_task_data_is_refused(rows, kind, shots, message) -> None:
    with pytest.raises(TaskDataError, match=message):
        InContextTask("t", kind, rows, shots)


def test_bad_suite_specs_are_refused(tmp_path) -> None:
    with pytest.raises(TaskDataError, match="unknown task 'mmlu'"):
        load_tasks(["mmlu=somewhere"])
    with pytest.raises(TaskDataError, match="no tasks.json"):
        load_tasks([f"core={tmp_path}"])
    (tmp_path / "tasks.json").write_text(json.dumps({"tasks": [{"name": "copa"}]}))
    with pytest.raises(TaskDataError, match="lacks one of"):
        load_tasks([f"core={tmp_path}"])


def copy_task(folder, entry: dict, rows: list[dict]) -> None:
    """A one-task tasks.json folder (for the CLI's bad-input cases)."""
    folder.mkdir(exist_ok=True)
    (folder / entry["file"]).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "tasks.json").write_text(json.dumps({"tasks": [entry], "missing": []}), encoding="utf-8")


def test_cli_suite_table_and_json(tiny_model, tmp_path, capsys) -> None:
    folder = shared_or_skip("core_tasks")
    out = tmp_path / "eval.json"
    args = [str(tiny_model.hf_dir), f"--suite=core={folder}", "--limit", "36", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "CORE " in printed and "missing (not available offline, not in the mean): hellaswag_zeroshot" in printed
    core = json.loads(out.read_text())["tasks"]["core"]
    assert core["n"] == 36 and core["n_tasks"] == 18 and set(core["tasks"]["arc_easy"]) >= {"gold_prob", "gold_bpb"}


COPA = {
    "name": "copa",
    "suite": "core",
    "file": "copa.jsonl",
    "icl_task_type": "multiple_choice",
    "num_fewshot": 0,
    "continuation_delimiter": " ",
    "random_baseline": 50.0,
}


@pytest.mark.parametrize(
    ("entry", "rows", "message"),
    [
        (COPA, [{"context": "a", "continuation": "b"}], "copa.jsonl:1: not a multiple_choice row"),
        ({**COPA, "num_fewshot": 3}, MC[:3], "copa: 3-shot needs 3 example rows besides the item"),
        ({**COPA, "icl_task_type": "generation"}, MC[:3], "unknown icl_task_type 'generation'"),
        ({**COPA, "num_fewshot": 70000}, MC[:3], "task 1 `num_fewshot` must be a whole number in [0, 65536]"),
        ({**COPA, "num_fewshot": float("inf")}, MC[:3], "task 1 `num_fewshot`: expected a whole number, got inf"),
        ({**COPA, "num_fewshot": 1.5}, MC[:3], "task 1 `num_fewshot`: expected a whole number, got 1.5"),
        ({**COPA, "random_baseline": float("nan")}, MC[:3], "`random_baseline` must be a number in [0, 100], got nan"),
    ],
)
def test_cli_bad_suite_input_is_one_line(tiny_model, tmp_path, capsys, entry, rows, message) -> None:
    copy_task(tmp_path / "suite", entry, rows)
    assert main([str(tiny_model.hf_dir), f"--suite=core={tmp_path / 'suite'}", "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "o.json").exists()


def test_cli_unknown_suite_is_one_line(tmp_path, capsys) -> None:
    assert main([str(tmp_path), "--suite=mmlu=/nowhere"]) == 2
    assert capsys.readouterr().err == "error: unknown suite 'mmlu'; choose from core, fineweb\n"


def test_fewshot_from_another_file(tmp_path) -> None:
    pool = [{"query": f"P{i}?", "choices": ["x", "y"], "gold": 1} for i in range(5)]
    task = InContextTask("t", "multiple_choice", MC[:2], num_fewshot=3, fewshot_rows=pool)  # 2 rows, 3 shots
    expected = random.Random(1234 + 1).sample(pool, 3)
    assert task.shots(1) == "".join(f"{r['query']} y\n\n" for r in expected)
    with pytest.raises(TaskDataError, match="4-shot needs 4 example rows; the few-shot pool offers 2"):
        InContextTask("t", "multiple_choice", MC[:9], num_fewshot=4, fewshot_rows=pool[:2])
    folder = shared_or_skip("core_tasks")
    suite = load_task("core", folder)
    suite.draw_shots_from(folder)  # the same files: every row is a candidate shot, the item included
    arc = next(t for t in suite.tasks if t.name == "arc_easy")
    assert arc.fewshot_rows == arc.rows
