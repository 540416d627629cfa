"""`python -m evals.ablate`: two real datasets through the project's CLIs, equal budgets, resumable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from evals.ablate import SpecError, load_spec
from tests.evals.conftest import shared_or_skip, wiki_articles
from tests.evals.helpers import REPO, blimp_spread, write_jsonl


def ablate_cli(spec, out) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "evals.ablate", str(spec), "--out", str(out)]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.e2e
def test_ablation_of_two_datasets_writes_results_and_resumes(tmp_path) -> None:
    articles = wiki_articles()
    shakespeare = shared_or_skip("tinyshakespeare", "input.txt").read_text(encoding="utf-8")
    wiki = tmp_path / "wiki" / "curated"
    wiki.mkdir(parents=True)
    paragraphs = [p for a in articles[:12] for p in a.split("\n") if p.strip()]  # short documents: the budget
    pq.write_table(pa.table({"text": paragraphs}), wiki / "a.parquet")  # is met to within a document
    plays = tmp_path / "plays"
    plays.mkdir()
    scenes = [shakespeare[i : i + 1000] for i in range(0, 200000, 1000)]
    pq.write_table(pa.table({"text": scenes}), plays / "a.parquet")
    write_jsonl([{"text": articles[40][:6000]}], tmp_path / "held_out.jsonl")
    write_jsonl(blimp_spread(60), tmp_path / "blimp.jsonl")
    spec = {
        "datasets": [{"name": "wiki", "path": "wiki"}, {"name": "plays", "path": "plays/*.parquet"}],
        "tokenizer_sample_chars": 100000,
        "vocab_size": 512,
        "model": "tiny",
        "tokens": 30000,
        "max_repetition": 2,
        "seq_len": 64,
        "seeds": [0],
        "eval_points": 2,
        "train": {"micro_batch": 8, "lr": 0.01, "nproc": 1, "extra": ["--no-bf16"]},
        "tasks": {"bpb": "held_out.jsonl", "blimp": "blimp.jsonl", "core": str(shared_or_skip("core_tasks"))},
        "limit": {"core": 12},  # 12 rows of each CORE task
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "ablation"
    proc = ablate_cli(tmp_path / "spec.yaml", out)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    report = json.loads((out / "ablation.json").read_text())
    runs = report["runs"]
    assert {(r["dataset"], r["seed"]) for r in runs} == {("wiki", 0), ("plays", 0)}
    assert len(runs) == 4  # 2 datasets x 1 seed x 2 evaluation points
    for r in runs:
        assert set(r["metrics"]) == {"bpb", "blimp", "core", "core_v2", "core_gold_prob", "core_gold_bpb"}
        assert r["tokens"] > 0
    final = {d: max(r["tokens"] for r in runs if r["dataset"] == d) for d in ("wiki", "plays")}
    assert abs(final["wiki"] - final["plays"]) <= 0.03 * final["wiki"]  # the same budget, to within documents
    wiki_bpb = [r["metrics"]["bpb"] for r in runs if r["dataset"] == "wiki" and r["tokens"] == final["wiki"]]
    plays_bpb = [r["metrics"]["bpb"] for r in runs if r["dataset"] == "plays" and r["tokens"] == final["plays"]]
    print(f"held-out Wikipedia bpb: trained on wiki {wiki_bpb}, on plays {plays_bpb}")
    assert max(wiki_bpb) < min(plays_bpb)  # in-domain data wins on in-domain held-out text
    assert (out / "plots" / "bpb.png").is_file() and "wiki" in (out / "index.html").read_text()
    bpb = report["decision"]["bpb"]
    assert bpb["ranking"] == ["wiki", "plays"] and bpb["pairs"][0]["better"] == "wiki"
    assert "<h3>bpb: " in (out / "index.html").read_text() and "[ablate] bpb: SNR" in proc.stdout

    again = ablate_cli(tmp_path / "spec.yaml", out)  # everything done: nothing retrained or re-evaluated
    assert again.returncode == 0 and "[ablate] train" not in again.stdout and "[ablate] mixture" not in again.stdout
    assert json.loads((out / "ablation.json").read_text()) == report


def test_final_table_and_plots_show_the_seed_spread(tmp_path) -> None:
    from evals.ablate import decision_html, final_table, plot, write_index
    from evals.decide import decisions

    rows = [
        {"dataset": d, "seed": s, "step": step, "tokens": step * 100, "metrics": {"bpb": base + s * 0.1 - step * 0.01}}
        for d, base in (("a", 2.0), ("b", 3.0))
        for s in (0, 1)
        for step in (1, 2)
    ]
    table = final_table(rows)
    assert table["a"]["bpb"] == pytest.approx((2.0 + 0.05 - 0.02, 0.05, 2))
    assert table["b"]["bpb"][2] == 2
    plots = plot(rows, tmp_path / "plots")
    page = write_index(table, plots, tmp_path, decision_html(decisions(rows))).read_text()
    assert [p.name for p in plots] == ["bpb.png"] and "2.0300 &plusmn; 0.0500 (n=2)" in page
    assert "<h3>bpb: decided</h3>" in page and "a better of a / b: seeds 100 %, checkpoints 100 %" in page


def test_bad_specs_are_refused(tmp_path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "none.yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"datasets": [], "tokens": 1, "tasks": {}}))
    with pytest.raises(SpecError, match="non-empty"):
        load_spec(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({"datasets": [{"name": "a", "path": "x"}], "tokens": 1, "tasks": {}, "budget": 3})
    )
    with pytest.raises(SpecError, match="unknown keys"):
        load_spec(tmp_path / "s.yaml")


def test_a_budget_beyond_the_datasets_bytes_is_refused_before_any_work(tmp_path) -> None:
    """A byte-level token covers a byte or more: 20 documents of 140 UTF-8 bytes (2,800, 12 characters of
    14 bytes each) give at most 2,800 + 2 x 20 tokens per pass; `tokens` beyond that x max_repetition
    failed only in mixtures.build, after a tokenizer was trained."""
    from evals.ablate import AblationSpec, Dataset, check_budget

    docs = tmp_path / "docs"
    docs.mkdir()
    pq.write_table(pa.table({"text": ["héllo wörld " * 10] * 20}), docs / "a.parquet")

    def spec(tokens: int, repetition: float = 1.0, tokenizer: str | None = None) -> AblationSpec:
        return AblationSpec([Dataset("a", str(docs))], tokens, {}, tokenizer=tokenizer, max_repetition=repetition)

    check_budget(spec(2840))
    check_budget(spec(5680, repetition=2))
    with pytest.raises(SpecError, match=r"dataset a: `tokens` 2,841 cannot be met: .* 2,800 bytes .* 2,840 tokens"):
        check_budget(spec(2841))
    with pytest.raises(SpecError, match=r"max_repetition 2;"):
        check_budget(spec(5681, repetition=2))
    normalizing = tmp_path / "nfkc.json"  # a normalizer may expand text: no bound from the bytes
    normalizing.write_text(json.dumps({"normalizer": {"type": "NFKC"}, "model": {}}))
    check_budget(spec(10**9, tokenizer=str(normalizing)))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"datasets": [{"name": "a", "path": "docs"}], "tokens": 1,
                                                     "tasks": {}, "max_repetition": 0}))  # fmt: skip
    with pytest.raises(SpecError, match=r"`max_repetition` must be a number in \(0, 10000\], got 0"):
        load_spec(tmp_path / "s.yaml")


def test_limit_takes_a_spread_subset_of_each_task_file(tmp_path) -> None:
    """BLiMP's first N pairs are one paradigm's: `limit` takes N rows spread over the whole file instead."""
    from evals.ablate import AblationSpec, Dataset, task_files

    rows = [{"UID": f"p{i // 100}", "i": i} for i in range(1000)]  # 10 "paradigms" of 100 rows
    write_jsonl(rows, tmp_path / "pairs.jsonl")
    spec = AblationSpec([Dataset("a", "x")], 1, {"blimp": str(tmp_path / "pairs.jsonl"), "bpb": "held.txt"})
    spec.limit = {"blimp": 20}
    files = task_files(spec, tmp_path / "out")
    assert files["bpb"] == "held.txt"  # no limit for it: the file as given
    picked = [json.loads(line) for line in open(files["blimp"])]
    assert [r["i"] for r in picked] == list(range(0, 1000, 50))
    assert {r["UID"] for r in picked} == {f"p{k}" for k in range(10)}


def test_the_ladder_specs_load_and_a_suite_limit_cuts_every_task(tmp_path) -> None:
    from evals.ablate import suite_subset
    from evals.tasks import load_task
    from trainer.model_spec import base_model

    for name in ("ladder", "ladder_cpu"):
        spec = load_spec(REPO / "examples" / "ablation" / f"{name}.yaml")
        assert set(spec.tasks) == {"core", "bpb"} and spec.decision_window == 3
    assert base_model(str(REPO / "examples" / "ablation" / "ladder_14m.yaml")).dim == 512
    folder = shared_or_skip("core_tasks")
    suite = load_task("core", suite_subset(folder, 12, tmp_path / "core"))
    assert [len(t) for t in suite.tasks] == [12] * 18 and len(suite.missing) == 4
