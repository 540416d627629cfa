"""Checks that used to come late (after 20-30 s of curation, or never) come first (issue 30): one `error:`
line, exit status 2, nothing written, before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pipelines.test_containment import SAMPLE, _refused
from tests.support.trainer_inputs import synthetic_run_inputs

GOOD_MODEL = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176}
BAD_MODELS = {
    "dim-zero": {**GOOD_MODEL, "dim": 0, "n_heads": 0},
    "dim-text": {**GOOD_MODEL, "dim": "64"},
    "layers-fraction": {**GOOD_MODEL, "n_layers": 1.5},
    "layers-huge": {**GOOD_MODEL, "n_layers": 10**9},
    "heads-negative": {**GOOD_MODEL, "n_heads": -4},
    "rope-nan": {**GOOD_MODEL, "rope_theta": float("nan")},
    "seq-huge": {**GOOD_MODEL, "max_seq_len": 10**9},
}


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--vocab-size", str(2**32 + 1)], "--vocab-size"),
        (["--vocab-size", "257"], "--vocab-size"),
        (["--seq-len", "100000000"], "--seq-len"),
        (["--nproc", "100000"], "--nproc"),
    ],
)
def test_chain_knobs_out_of_range(tmp_path: Path, flags: list[str], needle: str) -> None:
    _refused(tmp_path, "pipelines.run", [SAMPLE, "--out", str(tmp_path / "out"), "--train", *flags], needle)


@pytest.mark.parametrize("kind", BAD_MODELS)
def test_bad_model_files_before_curation(tmp_path: Path, kind: str) -> None:
    model = tmp_path / "model.json"
    model.write_text(json.dumps(BAD_MODELS[kind]))
    _refused(tmp_path, "pipelines.run", [SAMPLE, "--out", str(tmp_path / "out"), "--train", "--model", str(model)],
             "--model")  # fmt: skip


@pytest.fixture(scope="module")
def train_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return synthetic_run_inputs(tmp_path_factory.mktemp("late") / "inputs", vocab=96, n_docs=20, seq_len=32)


@pytest.mark.parametrize(
    "flags, needle",
    [(["--lr", "inf"], "--lr"), (["--lr", "nan"], "--lr"), (["--grad-clip", "inf"], "--grad-clip"),
     (["--seq-len", "100000000"], "--seq-len")],
)  # fmt: skip
def test_trainer_values_that_train_nothing(tmp_path: Path, train_inputs, flags: list[str], needle: str) -> None:
    shards, tok = train_inputs
    argv = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "train"), *flags]
    _refused(tmp_path, "trainer.fsdp_train", argv, needle)


def test_export_out_in_the_checkpoint_is_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "train" / "checkpoints" / "step_10"
    checkpoint.mkdir(parents=True)
    (checkpoint / "checksums.json").write_text("{}")
    for out in (checkpoint, checkpoint / "hf", tmp_path / "train"):
        _refused(tmp_path, "trainer.export_hf", ["--checkpoint", str(checkpoint), "--out", str(out)], "apart")
