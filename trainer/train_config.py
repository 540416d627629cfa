"""What a training run is asked to do (`TrainConfig`), and the CLI that fills it.

The CLI flags are the config's fields, mechanically: underscores become dashes, booleans are
`--flag / --no-flag`, `Literal` types are choices, and the nested `optim: OptimConfig` is spelled
out in place (`--lr`, `--warmup-steps`, `--betas B1 B2`, ... as flat flags). This module is the one
place that maps flags onto the nested dataclass, both ways (parsing, and the flat record written
into run_config.json). `HELP` says what the less obvious flags do (shown by `--help`).
"""

from __future__ import annotations

import argparse
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from trainer.optim import OptimConfig
from trainer.parallelize import ACMode
from trainer.pipeline_parallel import PPSchedule

# OptimConfig fields that are flags, in its field order (which is the flag order).
OPTIM_FLAGS = tuple(f.name for f in fields(OptimConfig))
ScheduleSpan = Literal["epoch", "max_steps"]


@dataclass
class TrainConfig:
    """Everything a run needs; the CLI flags are these fields (with `optim`'s spelled out)."""

    shards: Path
    tokenizer: Path
    out: Path
    model: str = "tiny"  # a preset name or a model YAML (ModelConfig fields)
    dim: int | None = None  # the shape flags override the preset's (or the YAML's) fields
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    ffn_dim: int | None = None
    qk_norm: bool = False
    untied: bool = False
    document_masking: bool = False  # attention and RoPE positions stop at <|endoftext|> inside a window
    vocab_multiple: int = 64
    seq_len: int | None = None  # default: the manifest's seq_len
    global_batch_tokens: int | None = None  # derives micro_batch x grad_accum (trainer.batch)
    micro_batch: int = 8
    grad_accum: int = 1
    optim: OptimConfig = field(default_factory=OptimConfig)
    seed: int = 0
    bf16: bool = True
    ac: ACMode = "none"
    compile: bool = False
    log_every: int = 10
    eval_every: int = 0
    eval_task: list[str] = field(default_factory=list)  # NAME=PATH as `evals.run --task` (trainer.eval_tasks)
    eval_limit: int | None = None
    eval_batch_size: int = 16
    val_shards: Path | None = None
    val_holdout_files: int = 0
    val_batches: int = 8
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    stop_file: Path | None = None  # checkpoint and stop once this file appears (trainer.preemption)
    init_from: Path | None = None  # a new phase from trained weights (trainer.init_from)
    init_optimizer: bool = False
    max_steps: int | None = None  # stop early; the schedule spans the epoch unless schedule_span=max_steps
    schedule_span: ScheduleSpan = "epoch"
    spike_guard: bool = True  # trainer.stability: thresholds and their sources
    spike_window: int = 128
    spike_sigma: float = 6.0
    spike_rollback_after: int = 8
    export_hf: bool = True
    gpu: str = "auto"
    device: str = "auto"
    save_data_indices: bool = False
    profile_steps: str | None = None  # "A:B": Chrome traces of steps A..B per rank (trainer.profiling)
    oom_snapshot: bool = False
    verify_shards: bool = True
    # How the ranks split the work (trainer/mesh.py): their product is the world size.
    dp_replicate: int = 1  # HSDP: model replicas (e.g. one per node), all-reduced
    dp_shard: int = -1  # FSDP shards per replica; -1: the ranks the other degrees leave
    tp: int = 1  # tensor + sequence parallel degree (within a node)
    pp: int = 1  # pipeline stages
    cp: int = 1  # context parallel degree (ring attention; CUDA only)
    pp_schedule: PPSchedule = "1F1B"

    def check(self) -> None:
        """What types cannot say, before any work: counts and rates in range, an `--out` that can be written
        (a ValueError, one line, raised on every rank alike)."""
        from common.lock import check_writable

        at_least = {"micro_batch": 1, "grad_accum": 1, "log_every": 1, "keep_checkpoints": 1, "vocab_multiple": 1,
                    "val_batches": 0, "val_holdout_files": 0, "eval_every": 0, "checkpoint_every": 0,
                    "eval_batch_size": 1}  # fmt: skip
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}")
        for name in ("seq_len", "max_steps", "global_batch_tokens", "eval_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        optim = self.optim
        if not optim.lr > 0 or not optim.weight_decay >= 0 or not optim.grad_clip >= 0:
            raise ValueError(f"--lr must be > 0, --weight-decay and --grad-clip >= 0, got {optim.lr}, "
                             f"{optim.weight_decay}, {optim.grad_clip}")  # fmt: skip
        if not 0 <= optim.min_lr_ratio <= 1 or not all(0 <= b < 1 for b in optim.betas):
            raise ValueError(f"--min-lr-ratio must be in [0, 1] and --betas in [0, 1), got {optim.min_lr_ratio}, "
                             f"{optim.betas}")  # fmt: skip
        if self.eval_task and (self.tp > 1 or self.pp > 1):
            raise ValueError("--eval-task runs under FSDP / HSDP layouts only (--tp 1 --pp 1)")
        check_writable(self.out)


HELP: dict[str, str] = {
    "model": "a preset (tiny, 125M, 350M, 1B, 7B) or a YAML/JSON file of ModelConfig fields (trainer/config.py)",
    "dim": "model width; with --n-layers --n-heads --n-kv-heads --ffn-dim overrides the --model preset's shape",
    "vocab_multiple": "pad the model vocabulary up to a multiple of this (1: no padding); GPUs prefer 64",
    "global_batch_tokens": "tokens per optimizer step; derives --grad-accum (and lowers --micro-batch "
    "to a divisor if needed) from --seq-len and the number of ranks; --micro-batch is the upper bound",
    "max_steps": "stop after this many optimizer steps (a run is otherwise exactly one epoch of its shards); "
    "the LR schedule still spans the whole epoch unless --schedule-span max_steps",
    "schedule_span": "epoch: warmup/decay over the whole epoch; max_steps: over --max-steps (a short run decays fully)",
    "betas": "AdamW (beta1, beta2)",
    "document_masking": "attention does not cross <|endoftext|> inside a window and positions restart per "
    "document (an SDPA mask: slower than plain causal attention)",
    "spike_guard": "skip an update whose loss or grad norm is not finite or > mean + sigma*std of the last "
    "--spike-window accepted steps (OLMo-core's defaults: 128, 6); a 'spike' record goes to metrics.jsonl",
    "init_from": "start this run (a new phase, e.g. an anneal on another mixture) from the weights of a "
    "trainer checkpoint step_* dir or an exported HF folder; data position and LR schedule start at 0",
    "init_optimizer": "with --init-from a checkpoint: also load its AdamW state",
    "profile_steps": "A:B: torch.profiler Chrome trace of optimizer steps A..B (1-based), one per rank, "
    "with shapes and memory, in OUT/profile/",
    "oom_snapshot": "CUDA: record allocator history; dump OUT/profile/oom_rankR.pickle when a step runs out of memory",
    "eval_every": "every N steps: the validation loss (with a held-out set) and the --eval-task tasks",
    "eval_task": "NAME=PATH, repeatable: bpb, blimp or mc on its file (as python -m evals.run --task), on the "
    "sharded model every --eval-every steps and at the end; figures into metrics.jsonl",
    "eval_limit": "only the first N items of each --eval-task at each evaluation",
    "eval_batch_size": "sequences per forward in --eval-task evaluation",
    "spike_rollback_after": "after this many skipped steps in a row reload the last checkpoint "
    "(keeping the data position); 0: never",
}


def flat_record(cfg: TrainConfig) -> dict[str, Any]:
    """The config as its flags would spell it (optim expanded in place), paths as strings: for JSON."""
    record: dict[str, Any] = {}
    for name, value in asdict(cfg).items():
        if name == "optim":
            record.update({k: list(value[k]) if k == "betas" else value[k] for k in OPTIM_FLAGS})
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
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            out.append((f.name, hints[f.name], default))
    return out


def _add_flag(parser: argparse.ArgumentParser, name: str, hint: Any, default: Any) -> None:
    flag = "--" + name.replace("_", "-")
    kw: dict[str, Any] = {"help": HELP.get(name)}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: optional, type X
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if default is MISSING:
        parser.add_argument(flag, type=hint, required=True, **kw)
    elif hint is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, **kw)
    elif typing.get_origin(hint) is typing.Literal:
        parser.add_argument(flag, choices=list(typing.get_args(hint)), default=default, **kw)
    elif typing.get_origin(hint) is list:  # repeatable, e.g. --eval-task bpb=a --eval-task blimp=b
        parser.add_argument(flag, type=typing.get_args(hint)[0], action="append", default=default, **kw)
    elif typing.get_origin(hint) is tuple:  # fixed-length numbers, e.g. --betas 0.9 0.95
        args = typing.get_args(hint)
        parser.add_argument(flag, type=args[0], nargs=len(args), default=default, metavar=name.upper(), **kw)
    else:
        parser.add_argument(flag, type=hint, default=default, **kw)


def parse_args(argv: list[str] | None = None, description: str | None = None) -> TrainConfig:
    """CLI flags mirror TrainConfig fields (underscores -> dashes; booleans as --flag / --no-flag)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, hint, default in _flag_fields():
        _add_flag(parser, name, hint, default)
    values = vars(parser.parse_args(argv))
    optim = OptimConfig(**{name: values.pop(name) for name in OPTIM_FLAGS})
    optim = replace(optim, betas=tuple(optim.betas))
    return TrainConfig(**values, optim=optim)
