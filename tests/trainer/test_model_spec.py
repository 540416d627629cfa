"""The model from the CLI: a preset, a model YAML, shape flags on top, the vocab padding flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import PRESETS
from trainer.fsdp_train import parse_args
from trainer.model_spec import ModelSpecError, model_config, model_label

NANOGPT_SHAKESPEARE = ["--dim", "128", "--n-layers", "4", "--n-heads", "4", "--ffn-dim", "344"]


def _args(*extra: str) -> list[str]:
    return ["--shards", "s", "--tokenizer", "t", "--out", "o", *extra]


def test_shape_flags_override_the_preset() -> None:
    cfg = model_config(parse_args(_args(*NANOGPT_SHAKESPEARE, "--vocab-multiple", "1")), 65, 64)
    assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.ffn_dim, cfg.vocab_size) == (128, 4, 4, 344, 65)
    assert cfg.n_kv_heads == 2  # the tiny preset's GQA ratio is kept unless --n-kv-heads says otherwise
    assert cfg.max_seq_len == PRESETS["tiny"].max_seq_len
    padded = model_config(parse_args(_args("--vocab-multiple", "64")), 65, 64)
    assert padded.vocab_size == 128 and padded == PRESETS["tiny"].with_vocab(65)


def test_the_log_names_the_flags_that_changed_the_preset() -> None:
    assert model_label(parse_args(_args())) == "tiny"
    label = model_label(parse_args(_args("--dim", "32", "--n-layers", "3", "--untied")))
    assert label == "tiny with --dim 32 --n-layers 3 --untied"


def test_a_model_yaml_is_a_model(tmp_path: Path) -> None:
    path = tmp_path / "shakespeare.yaml"
    path.write_text("dim: 128\nn_layers: 4\nn_heads: 4\nffn_dim: 344\nmax_seq_len: 64\n")
    cfg = model_config(parse_args(_args("--model", str(path), "--n-layers", "6")), 65, 256)
    assert (cfg.dim, cfg.n_layers, cfg.n_kv_heads, cfg.max_seq_len) == (128, 6, 4, 256)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dim: 128\nlayers: 4\n", "unknown field"),
        ("dim: 128\nn_layers: 4\n", "missing"),
        ("dim: 132\nn_layers: 4\nn_heads: 4\nffn_dim: 8\n", "head_dim must be even"),
        ("- 1\n", "mapping"),
    ],
)
def test_a_bad_model_file_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ModelSpecError, match=message) as err:
        model_config(parse_args(_args("--model", str(path))), 65, 64)
    assert "\n" not in str(err.value)


def test_bad_names_and_shapes_are_refused() -> None:
    with pytest.raises(ModelSpecError, match="unknown model 'huge'"):
        model_config(parse_args(_args("--model", "huge")), 65, 64)
    with pytest.raises(ModelSpecError, match="multiple of n_heads"):
        model_config(parse_args(_args("--dim", "100", "--n-heads", "3")), 65, 64)
    with pytest.raises(ModelSpecError, match="does not exist"):
        model_config(parse_args(_args("--model", "nope.yaml")), 65, 64)
