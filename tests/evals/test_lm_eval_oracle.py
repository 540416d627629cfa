"""Our BLiMP and multiple-choice results equal lm-evaluation-harness's `hf` backend on the same model and data.

lm-eval runs in a subprocess (`python -m evals.harness`) with the Hugging Face offline switches on,
so it cannot reach the network and its `datasets` import sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evals.models import load_model
from evals.tasks import Blimp, MultipleChoice, evaluate
from tests.evals.helpers import MC_EXAMPLE, REPO, blimp_spread, write_jsonl

pytest.importorskip("lm_eval")


def lm_eval_report(hf_dir, tasks: dict, out) -> dict:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["HF_HOME"] = str(out.parent / "hf_home")  # an empty cache: nothing can come from a previous download
    args = [sys.executable, "-m", "evals.harness", str(hf_dir), "--out", str(out), "--batch-size", "32"]
    args += [f"--task={k}={v}" for k, v in tasks.items()]
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.e2e
def test_blimp_and_mc_equal_lm_eval(tiny_model, tmp_path) -> None:
    pairs = write_jsonl(blimp_spread(400), tmp_path / "blimp.jsonl")
    theirs = lm_eval_report(tiny_model.hf_dir, {"blimp": pairs, "mc": MC_EXAMPLE}, tmp_path / "lm_eval.json")
    model = load_model(tiny_model.hf_dir, backend="ours", device="cpu")
    score = model.scorer(batch_size=32)

    blimp = Blimp.from_path(pairs)
    ours = evaluate(blimp, model.encoder, score)
    reqs = blimp.requests(model.encoder, range(len(blimp)))
    our_lls = [score(r) for r in reqs]
    lls = theirs["blimp"]["lls"]
    diff = max(
        abs(a - b)
        for ours_pair, their_pair in zip(our_lls, lls, strict=True)
        for a, b in zip(ours_pair, their_pair, strict=True)
    )
    right_theirs = sum(g >= b for g, b in lls)
    print(
        f"BLiMP {ours['n']} pairs: right ours {round(ours['accuracy'] * ours['n'])}, lm-eval {right_theirs}; "
        f"max |ll diff| {diff:.2e}"
    )
    assert ours["n"] == len(lls) == 400
    assert round(ours["accuracy"] * ours["n"]) == right_theirs
    assert ours["accuracy"] == pytest.approx(theirs["blimp"]["metrics"]["acc"], abs=1e-12)
    assert [g >= b for g, b in our_lls] == [g >= b for g, b in lls]  # the same pairs right, not only as many
    assert diff <= 1e-4

    mc = evaluate(MultipleChoice.from_path(MC_EXAMPLE), model.encoder, score)
    print(f"MC: ours acc {mc['acc']:.4f} acc_norm {mc['acc_norm']:.4f}; lm-eval {theirs['mc']['metrics']}")
    assert mc["acc"] == pytest.approx(theirs["mc"]["metrics"]["acc"], abs=1e-12)
    assert mc["acc_norm"] == pytest.approx(theirs["mc"]["metrics"]["acc_norm"], abs=1e-12)


@pytest.mark.e2e
def test_core_rows_of_arc_piqa_copa_winogrande_equal_lm_eval(tiny_model, tmp_path) -> None:
    """llm-foundry rows converted to lm-eval's prompts (`lm_eval_rows`), one local json task each: the same
    right answers by acc and acc_norm, question by question (WinoGrande as lm-eval's multiple-input task)."""
    from evals.harness import lm_eval_rows
    from tests.evals.test_icl import core_rows

    files = {}
    for name in ("arc_easy", "piqa", "copa", "winogrande"):
        rows = core_rows(f"{name}.jsonl.gz")
        kind = "mc_partial" if name == "winogrande" else "mc"
        files[f"{kind}:{name}"] = write_jsonl(
            lm_eval_rows(name, rows[:: max(1, len(rows) // 60)][:60]), tmp_path / f"{name}.jsonl"
        )
    theirs = lm_eval_report(tiny_model.hf_dir, files, tmp_path / "lm_eval.json")
    model = load_model(tiny_model.hf_dir, backend="ours", device="cpu")
    score = model.scorer(batch_size=32)
    for key, path in files.items():
        task = MultipleChoice.from_path(path)
        ours = evaluate(task, model.encoder, score)
        lls = theirs[key]["lls"]
        right_theirs = sum(
            max(range(len(ll)), key=lambda i, ll=ll: (ll[i], -i)) == q["gold"]
            for ll, q in zip(lls, task.questions, strict=True)
        )
        right = round(ours["acc"] * ours["n"]), round(ours["acc_norm"] * ours["n"])
        print(f"{key}: ours acc / acc_norm right {right} of {ours['n']}; lm-eval {theirs[key]['metrics']}")
        assert ours["n"] == len(lls)
        assert round(ours["acc"] * ours["n"]) == round(theirs[key]["metrics"]["acc"] * len(lls)) == right_theirs
        assert round(ours["acc_norm"] * ours["n"]) == round(theirs[key]["metrics"]["acc_norm"] * len(lls))
