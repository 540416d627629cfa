"""The model a run trains: a preset or a model YAML, then the shape flags, then the tokenizer's vocab.

`--model` names a preset (`trainer.config.PRESETS`) or a YAML/JSON file of `ModelConfig` fields, so a
shape that is no preset (nanoGPT's 4 x 128 shakespeare model, an ablation's) needs no code edit;
`--dim --n-layers --n-heads --n-kv-heads --ffn-dim` override single fields of either. Errors are one
line naming the field.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from common import strict_yaml
from common.bounded_input import read_bounded
from trainer.config import PRESETS, ModelConfig
from trainer.train_config import TrainConfig

SHAPE_FLAGS = ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim")
MOE_FLAGS = tuple(f.name for f in fields(ModelConfig) if f.name.startswith("moe_"))
MUP_FLAGS = ("mup_base_dim",)


class ModelSpecError(ValueError):
    """A model YAML or shape flag that does not describe a model."""


def _from_file(path: Path) -> ModelConfig:
    try:
        text = read_bounded(path).decode("utf-8")
        data = json.loads(text) if path.suffix == ".json" else strict_yaml.load_text(text)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise ModelSpecError(f"model file {path}: {err}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ModelSpecError(f"model file {path}: expected a mapping of ModelConfig fields")
    known = {f.name for f in fields(ModelConfig)} - {"vocab_size"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ModelSpecError(f"model file {path}: unknown field(s) {unknown}; known: {sorted(known)}")
    data.setdefault("n_kv_heads", data.get("n_heads"))
    missing = [name for name in SHAPE_FLAGS if data.get(name) is None]
    if missing:
        raise ModelSpecError(f"model file {path}: missing {missing}")
    return _build(lambda: ModelConfig(**data), str(path))


def _build(make: Any, where: str) -> ModelConfig:
    try:
        return make()
    except (TypeError, ValueError) as err:
        raise ModelSpecError(f"{where}: {err}") from None


def base_model(name: str) -> ModelConfig:
    """A preset by name, else a model file by path."""
    if name in PRESETS:
        return PRESETS[name]
    path = Path(name)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        if not path.is_file():
            raise ModelSpecError(f"model file {path} does not exist")
        return _from_file(path)
    raise ModelSpecError(f"unknown model {name!r}: choose a preset {sorted(PRESETS)} or a .yaml/.json file")


def model_label(cfg: TrainConfig) -> str:
    """The model as the command gave it: the preset or file, and the flags that changed its shape (a log naming
    only ``tiny`` for ``--model tiny --dim 32`` described a model that did not train)."""
    changed = [f"--{name.replace('_', '-')} {getattr(cfg, name)}" for name in (*SHAPE_FLAGS, *MOE_FLAGS, *MUP_FLAGS)
               if getattr(cfg, name) is not None]  # fmt: skip
    changed += [f"--{name.replace('_', '-')}" for name in ("qk_norm", "untied") if getattr(cfg, name)]
    return f"{cfg.model} with {' '.join(changed)}" if changed else cfg.model


def model_config(cfg: TrainConfig, vocab_size: int, seq_len: int) -> ModelConfig:
    """The base model with the run's overrides, its vocab padded from the tokenizer's, long enough for seq_len."""
    base = base_model(cfg.model)
    overrides: dict[str, Any] = {name: getattr(cfg, name) for name in SHAPE_FLAGS if getattr(cfg, name) is not None}
    if cfg.n_heads is not None and cfg.n_kv_heads is None and base.n_heads == base.n_kv_heads:
        overrides["n_kv_heads"] = cfg.n_heads  # multi-head base stays multi-head
    if cfg.qk_norm:
        overrides["qk_norm"] = True
    if cfg.untied:
        overrides["tie_embeddings"] = False
    if any(v is not None and v < 1 for v in overrides.values() if not isinstance(v, bool)):
        raise ModelSpecError(f"model shape flags must be >= 1, got {overrides}")
    overrides.update({name: getattr(cfg, name) for name in (*MOE_FLAGS, *MUP_FLAGS) if getattr(cfg, name) is not None})
    shaped = _build(lambda: replace(base, **overrides), "model shape flags")
    if cfg.vocab_multiple < 1:
        raise ModelSpecError(f"--vocab-multiple must be >= 1, got {cfg.vocab_multiple}")
    model_cfg = shaped.with_vocab(vocab_size, cfg.vocab_multiple)
    if model_cfg.max_seq_len < seq_len:
        model_cfg = replace(model_cfg, max_seq_len=seq_len)
    return model_cfg
