"""Start a new phase from trained weights: `--init-from CHECKPOINT_OR_HF_FOLDER` (staged training, seed 003).

An anneal or mid-training phase is a new run on a new mixture (its own epoch, its own LR schedule,
e.g. `--schedule wsd --wsd-decay-fraction 1 --warmup-steps 1` for a pure decay) that starts from the
weights an earlier phase ended with. `--resume` is the other thing: the same run, the same data
position. Here only weights (and, with `--init-optimizer`, a DCP checkpoint's AdamW moments) carry
over; the data position and the schedule start at 0. The source is a trainer checkpoint
(`step_*/` with `trainer_state.json`) or a Hugging Face folder this trainer exported; its model shape
must be this run's, or the run is refused with the fields that differ.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from common.bounded_input import MAX_DATA_BYTES, read_json_bounded
from trainer.checkpoint import TRAINER_STATE
from trainer.config import ModelConfig
from trainer.export_hf import hf_name, load_checkpoint_model


class InitFromError(ValueError):
    """A source of initial weights that this run cannot start from."""


def _same_shape(mine: ModelConfig, theirs: dict[str, Any], where: Path) -> None:
    ignore = {"max_seq_len"}  # RoPE tables are recomputed; no weight depends on it
    differ = sorted(k for k, v in asdict(mine).items() if k not in ignore and k in theirs and theirs[k] != v)
    if differ:
        pairs = ", ".join(f"{k} {theirs[k]} vs {getattr(mine, k)}" for k in differ)
        raise InitFromError(f"--init-from {where}: another model shape ({pairs}; theirs vs this run's)")


def _hf_weights(folder: Path, model_cfg: ModelConfig, names: list[str]) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(folder / "model.safetensors"))
    except SafetensorError as err:  # a truncated or garbled file: safetensors' own error was a traceback
        raise InitFromError(f"--init-from {folder}: model.safetensors unreadable ({err})") from None
    weights = {}
    for name in names:
        key = hf_name(name)
        if name == "output.weight" and model_cfg.tie_embeddings:
            key = hf_name("tok_embeddings.weight")
        if key not in tensors:
            raise InitFromError(f"--init-from {folder}: model.safetensors has no {key} (exported by another model?)")
        weights[name] = tensors[key].float()
    return weights


def init_from(
    source: Path,
    model: nn.Module,
    model_cfg: ModelConfig,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, Any]:
    """Load `source`'s weights (and optimizer state when given) into the sharded `model`; return its record.

    Collective under torchrun: every rank reads the full weights and keeps its shards.
    """
    source = Path(source)
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    names = [n.replace("._checkpoint_wrapped_module", "").replace("_orig_mod.", "") for n in names]
    if (source / TRAINER_STATE).is_file():
        state = read_json_bounded(source / TRAINER_STATE, MAX_DATA_BYTES)
        _same_shape(model_cfg, state.get("model_config", {}), source)
        weights, _ = load_checkpoint_model(source)
        record = {"path": str(source.resolve()), "kind": "checkpoint", "step": state.get("step")}
        record["mixture"] = state.get("mixture") or {"shards": state.get("train_config", {}).get("shards")}
    elif (source / "model.safetensors").is_file():
        if optimizer is not None:
            raise InitFromError(f"--init-optimizer needs a trainer checkpoint; {source} is a Hugging Face folder")
        weights = _hf_weights(source, model_cfg, names)
        record = {"path": str(source.resolve()), "kind": "hf"}
    else:
        raise InitFromError(f"--init-from {source}: neither a trainer checkpoint nor a Hugging Face folder")
    try:
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    except (RuntimeError, KeyError, ValueError) as err:
        raise InitFromError(f"--init-from {source}: {str(err).splitlines()[0]}") from None
    if optimizer is not None:
        _, optim_sd = get_state_dict(model, optimizer)
        loaded = {"optim": optim_sd}
        dcp.load(loaded, checkpoint_id=source)
        set_optimizer_state_dict(model, optimizer, loaded["optim"])
        record["optimizer"] = True
    return record


def mixture_record(shards: Path) -> dict[str, Any]:
    """What run_config.json says about a run's mixture: enough to tell two phases' data apart."""
    from mixtures.manifest import MANIFEST_NAME, read_manifest, sha256_file

    manifest = read_manifest(shards, verify=False)
    return {
        "shards": str(Path(shards).resolve()),
        "manifest_sha256": sha256_file(Path(shards) / MANIFEST_NAME),
        "total_tokens": manifest.total_tokens,
        "seed": manifest.seed,
        "sources": {name: stats.tokens for name, stats in manifest.sources.items()},
    }
