"""The chain's SFT stage: `--sft` is checked before curation, and `run_sft` fine-tunes the trained model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.chain import ChainConfig, print_chain, run_sft
from pipelines.report.write import fine_tuning_section
from pipelines.run import main as run_main
from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl


@pytest.mark.parametrize(
    ("extra", "message"),
    [([], "need --train"), (["--train"], "--sft: "), (["--train", "--missing"], "does not exist")],
)
def test_bad_sft_flags_fail_before_any_work(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"messages": [{"role": "user", "content": "q"}]}])
    target = str(tmp_path / "missing.jsonl") if "--missing" in extra else str(bad)
    flags = [f for f in extra if f != "--missing"]
    assert run_main(["sample", "--out", str(tmp_path / "out"), *flags, "--sft", target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_run_sft_fine_tunes_the_trained_model_under_torchrun(tmp_path: Path, capsys) -> None:
    base = tiny_base(tmp_path / "train" / "hf", chat_tokenizer_dir(tmp_path / "tok"))
    data = write_jsonl(tmp_path / "conv.jsonl", arithmetic_records(400))
    result = run_sft(base, data, tmp_path / "sft", ChainConfig(nproc=2, micro_batch=8))
    assert (tmp_path / "sft" / "hf" / "model.safetensors").is_file()
    (before_step, before), (after_step, after) = result["val_response_loss"][0], result["val_response_loss"][-1]
    assert before_step == 0 and after_step > 0 and after < before
    print_chain({"tokenizer": "t", "mixture": "m", "metrics": str(tmp_path / "none"), "hf": str(base), "sft": result})
    assert "SFT held-out response loss" in capsys.readouterr().out
    assert json.loads((tmp_path / "sft" / "run_config.json").read_text())["base"] == str(base.resolve())
    shown = fine_tuning_section(tmp_path)  # what the run report shows of it (tmp_path plays the run directory)
    assert shown is not None and [list(p) for p in shown["val_response_loss"]] == [
        list(p) for p in result["val_response_loss"]
    ]
    assert f"{before:.3f} (base model) -> {after:.3f}" in shown["summary"]
