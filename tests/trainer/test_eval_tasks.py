"""`--eval-every N --eval-task NAME=PATH`: the tasks on the FSDP2-sharded model under real torchrun (2 ranks, gloo)
give the figures of single-process `python -m evals.run` on that step's checkpoint and on the export.

The shares are uneven on purpose (an odd number of BLiMP pairs and documents, a small batch), so one
rank runs more forwards than the other and the padding forwards that keep FSDP's all-gathers in
step are exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evals.run import main as evals_run
from tests.evals.conftest import wiki_articles
from tests.evals.helpers import blimp_spread, write_jsonl
from tests.support.trainer_inputs import bpe_tokenizer, read_jsonl, synthetic_run_inputs, torchrun, write_shards

EVERY = 12


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("eval-tasks")
    articles = wiki_articles()
    tok = bpe_tokenizer(root / "tok" / "tokenizer.json", "\n".join(articles[:8]), vocab_size=512)
    ids = [e.ids for e in Tokenizer.from_file(str(tok)).encode_batch(articles[:4], add_special_tokens=False)]
    write_shards(root / "shards", [np.array(d + [0]) for d in ids], tok, seq_len=64)
    bpb = write_jsonl([{"text": a[:2500]} for a in articles[30:33]], root / "bpb.jsonl")
    blimp = write_jsonl(blimp_spread(61), root / "blimp.jsonl")
    out = root / "train"
    torchrun(
        [
            "trainer/fsdp_train.py",
            "--shards",
            str(root / "shards"),
            "--tokenizer",
            str(tok),
            "--model",
            "tiny",
            "--out",
            str(out),
            "--no-bf16",
            "--micro-batch",
            "4",
            "--lr",
            "3e-3",
            "--log-every",
            "50",
            "--eval-every",
            str(EVERY),
            "--checkpoint-every",
            str(EVERY),
            "--keep-checkpoints",
            "10",
            "--eval-task",
            f"bpb={bpb}",
            "--eval-task",
            f"blimp={blimp}",
            "--eval-batch-size",
            "3",
        ]  # fmt: skip
    )
    records = [r for r in read_jsonl(out / "metrics.jsonl") if "tasks" in r]
    return {"out": out, "records": records, "bpb": bpb, "blimp": blimp}


def single_process(model: Path, bpb: Path, blimp: Path, dest: Path) -> dict:
    argv = [str(model), f"--task=bpb={bpb}", f"--task=blimp={blimp}", "--device", "cpu", "--batch-size", "8"]
    assert evals_run([*argv, "--no-progress", "--out", str(dest)]) == 0
    return json.loads(dest.read_text())["tasks"]


@pytest.mark.e2e
def test_in_training_figures_equal_evals_run_on_the_checkpoint_and_the_export(run: dict, tmp_path: Path) -> None:
    records = run["records"]
    steps = [r["step"] for r in records]
    last = steps[-1]
    assert steps[:-1] == list(range(EVERY, last, EVERY)) and len(steps) >= 3  # every N steps and at the end
    worst = 0.0
    for record in records:
        step = record["step"]
        model = run["out"] / "checkpoints" / f"step_{step:09d}"
        theirs = single_process(model, run["bpb"], run["blimp"], tmp_path / f"{step}.json")
        ours = record["tasks"]
        assert ours["bpb"]["bytes"] == theirs["bpb"]["bytes"] and ours["bpb"]["tokens"] == theirs["bpb"]["tokens"]
        worst = max(worst, abs(ours["bpb"]["bits_per_byte"] - theirs["bpb"]["bits_per_byte"]))
        assert ours["blimp"] == theirs["blimp"]  # the same right pairs: accuracy, per field, per paradigm
        assert record["bpb"] == ours["bpb"]["bits_per_byte"] and record["blimp"] == ours["blimp"]["accuracy"]
    exported = single_process(run["out"] / "hf", run["bpb"], run["blimp"], tmp_path / "hf.json")
    final = records[-1]["tasks"]
    worst = max(worst, abs(final["bpb"]["bits_per_byte"] - exported["bpb"]["bits_per_byte"]))
    assert final["blimp"] == exported["blimp"]
    print(f"max |bpb difference| over {len(records)} evaluations + the export: {worst:.2e}")
    assert worst < 1e-5
    assert records[0]["bpb"] > records[-1]["bpb"]  # and it learns


@pytest.mark.e2e
def test_the_curves_are_drawn(run: dict, tmp_path: Path) -> None:
    from trainer.plot import load_log, plot_log

    series, _ = load_log(run["out"] / "metrics.jsonl")
    assert [s for s, _ in series["bpb"]] == [r["step"] for r in run["records"]]
    assert len(series["blimp"]) == len(run["records"])
    assert plot_log(run["out"] / "metrics.jsonl", tmp_path / "curves.png").stat().st_size > 0


def test_a_bad_task_is_refused_before_training(tmp_path: Path) -> None:
    from evals.tasks import TaskDataError
    from trainer.fsdp_train import TrainConfig, train

    shards, tok = synthetic_run_inputs(tmp_path)
    for spec, message in (("nope=x", "unknown task"), ("bpb", "NAME=PATH"), ("bpb=/nonexistent.jsonl", "nonexistent")):
        out = tmp_path / "out"
        cfg = TrainConfig(shards=shards, tokenizer=tok, out=out, bf16=False, device="cpu", eval_task=[spec])
        with pytest.raises(TaskDataError, match=message):
            train(cfg)
        assert not (tmp_path / "out" / "metrics.jsonl").exists()
