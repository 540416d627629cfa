"""What a training run is asked to do (`TrainConfig`), and the CLI that fills it.

The CLI flags are the config's fields, mechanically: underscores become dashes, booleans are
`--flag / --no-flag`, `Literal` types are choices, and the nested `optim: OptimConfig` is spelled
out in place (`--lr`, `--warmup-steps`, ... as flat flags; `betas` has none). This module is the one
place that maps flags onto the nested dataclass, both ways (parsing, and the flat record written
into run_config.json).
"""

from __future__ import annotations

import argparse
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from trainer.config import PRESETS
from trainer.optim import OptimConfig
from trainer.parallelize import ACMode
from trainer.pipeline_parallel import PPSchedule

# OptimConfig fields that are flags, in its field order (which is the flag order).
OPTIM_FLAGS = tuple(f.name for f in fields(OptimConfig) if f.name != "betas")


@dataclass
class TrainConfig:
    """Everything a run needs; the CLI flags are these fields (with `optim`'s spelled out)."""

    shards: Path
    tokenizer: Path
    out: Path
    model: str = "tiny"
    qk_norm: bool = False
    untied: bool = False
    seq_len: int | None = None  # default: the manifest's seq_len
    micro_batch: int = 8
    grad_accum: int = 1
    optim: OptimConfig = field(default_factory=OptimConfig)
    seed: int = 0
    bf16: bool = True
    ac: ACMode = "none"
    compile: bool = False
    log_every: int = 10
    eval_every: int = 0
    val_shards: Path | None = None
    val_holdout_files: int = 0
    val_batches: int = 8
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    max_steps: int | None = None  # stop early; the schedule still spans the whole epoch
    export_hf: bool = True
    gpu: str = "auto"
    device: str = "auto"
    save_data_indices: bool = False
    verify_shards: bool = True
    # How the ranks split the work (trainer/mesh.py): their product is the world size.
    dp_replicate: int = 1  # HSDP: model replicas (e.g. one per node), all-reduced
    dp_shard: int = -1  # FSDP shards per replica; -1: the ranks the other degrees leave
    tp: int = 1  # tensor + sequence parallel degree (within a node)
    pp: int = 1  # pipeline stages
    cp: int = 1  # context parallel degree (ring attention; CUDA only)
    pp_schedule: PPSchedule = "1F1B"


def flat_record(cfg: TrainConfig) -> dict[str, Any]:
    """The config as its flags would spell it (optim expanded in place), paths as strings: for JSON."""
    record: dict[str, Any] = {}
    for name, value in asdict(cfg).items():
        if name == "optim":
            record.update({k: value[k] for k in OPTIM_FLAGS})
        else:
            record[name] = str(value) if isinstance(value, Path) else value
    return record


def _flag_fields() -> list[tuple[str, Any, Any]]:
    """(name, type hint, default) of every flag, in TrainConfig order with optim's fields in place."""
    hints = typing.get_type_hints(TrainConfig)
    optim_hints, optim_defaults = typing.get_type_hints(OptimConfig), OptimConfig()
    out = []
    for f in fields(TrainConfig):
        if f.name == "optim":
            out += [(name, optim_hints[name], getattr(optim_defaults, name)) for name in OPTIM_FLAGS]
        else:
            out.append((f.name, hints[f.name], f.default))
    return out


def _add_flag(parser: argparse.ArgumentParser, name: str, hint: Any, default: Any) -> None:
    flag = "--" + name.replace("_", "-")
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: optional, type X
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if default is MISSING:
        parser.add_argument(flag, type=hint, required=True)
    elif hint is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
    elif typing.get_origin(hint) is typing.Literal:
        parser.add_argument(flag, choices=list(typing.get_args(hint)), default=default)
    elif name == "model":
        parser.add_argument(flag, choices=sorted(PRESETS), default=default)
    else:
        parser.add_argument(flag, type=hint, default=default)


def parse_args(argv: list[str] | None = None, description: str | None = None) -> TrainConfig:
    """CLI flags mirror TrainConfig fields (underscores -> dashes; booleans as --flag / --no-flag)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, hint, default in _flag_fields():
        _add_flag(parser, name, hint, default)
    values = vars(parser.parse_args(argv))
    optim = OptimConfig(**{name: values.pop(name) for name in OPTIM_FLAGS})
    return TrainConfig(**values, optim=optim)
