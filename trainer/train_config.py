"""What a training run is asked to do (`TrainConfig`), and the CLI that fills it.

The CLI flags are the config's fields, mechanically: underscores become dashes, booleans are
`--flag / --no-flag`, `Literal` types are choices, and the nested `optim: OptimConfig` is spelled
out in place (`--lr`, `--warmup-steps`, `--betas B1 B2`, ... as flat flags). This module is the one
place that maps flags onto the nested dataclass, both ways (parsing, and the flat record written
into run_config.json). `HELP` says what the less obvious flags do (shown by `--help`).
"""

from __future__ import annotations

import argparse
import math
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from common.cli import BATCH, SEED, ArgumentParser, Bounded, integer, real
from common.storage import is_remote, local_path
from trainer.config import MAX_RANKS, MAX_SEQ_LEN, MODEL_RANGES, BalanceKind, GateKind
from trainer.optim import OptimConfig
from trainer.parallelize import ACMode
from trainer.pipeline_parallel import PPSchedule

# OptimConfig fields that are flags, in its field order (which is the flag order).
OPTIM_FLAGS = tuple(f.name for f in fields(OptimConfig))
ScheduleSpan = Literal["epoch", "max_steps"]

# The numeric flags' ranges (pretraining and SFT), checked while argv is parsed: one line and exit 2 before any
# work, instead of `--shard-block-kb 1e9` reading whole files per request or `--seed 2**64` failing in numpy
# after the model is built. They bound what a real run could ask for, far outside what the presets use.
MAX_STEPS = 1 << 32  # optimizer steps, intervals and counts of them: ~4 billion

FLAG_RANGES: dict[str, Bounded] = {
    **MODEL_RANGES, "vocab_multiple": integer(1, 1 << 16),
    "seq_len": integer(1, MAX_SEQ_LEN), "global_batch_tokens": integer(1, 1 << 36), "micro_batch": integer(1, 1 << 20),
    "grad_accum": integer(1, 1 << 20),
    "lr": real(0, 1e3, open_low=True), "weight_decay": real(0, 1e3), "warmup_steps": integer(0, MAX_STEPS),
    "min_lr_ratio": real(0, 1), "wsd_decay_fraction": real(0, 1), "grad_clip": real(0, 1e9), "z_loss": real(0, 1e3),
    "betas": real(0, 1, open_high=True), "muon_momentum": real(0, 1, open_high=True), "muon_qk_clip": real(0, 1e9),
    "seed": SEED, "log_every": integer(1, MAX_STEPS), "eval_every": integer(0, MAX_STEPS),
    "eval_limit": integer(1, 1 << 40), "eval_batch_size": BATCH, "val_holdout_files": integer(0, 1 << 24),
    "val_batches": integer(0, 1 << 24), "checkpoint_every": integer(0, MAX_STEPS),
    "keep_checkpoints": integer(1, 1 << 16), "max_steps": integer(1, MAX_STEPS), "spike_window": integer(1, 1 << 24),
    "spike_sigma": real(0, 1e6, open_low=True), "spike_rollback_after": integer(0, MAX_STEPS),
    "shard_cache_mb": integer(0, 1 << 24),  # 16 TiB: a node's scratch disk
    "shard_block_kb": integer(0, 1 << 16),  # 64 MiB a request: S3's largest recommended part; more reads whole files
    "dp_replicate": integer(1, MAX_RANKS), "dp_shard": integer(-1, MAX_RANKS), "tp": integer(1, MAX_RANKS),
    "pp": integer(1, MAX_RANKS), "cp": integer(1, MAX_RANKS), "ep": integer(1, MAX_RANKS),
}  # fmt: skip


def flag_type(name: str, kind: Any) -> Any:
    """The argparse type of flag `name`: its bounded range when it is a number, else `kind` itself."""
    if kind in (int, float):
        bounded = FLAG_RANGES[name]  # a new numeric field without a range fails every parse: give it one
        assert bounded.kind is kind, name
        return bounded
    return kind


@dataclass
class TrainConfig:
    """Everything a run needs; the CLI flags are these fields (with `optim`'s spelled out)."""

    shards: Path  # these three and val_shards: a local path, or an fsspec URL kept as a str (trainer/store.py)
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
    # Mixture of experts (trainer/moe.py): each overrides the model preset's / YAML's moe_* field when given.
    moe_experts: int | None = None
    moe_top_k: int | None = None
    moe_every: int | None = None
    moe_capacity: float | None = None
    moe_ffn_dim: int | None = None
    moe_gate: GateKind | None = None
    moe_balance: BalanceKind | None = None
    moe_aux_coef: float | None = None
    moe_bias_rate: float | None = None
    moe_shared_expert: bool | None = None
    mup_base_dim: int | None = None  # μP (trainer/mup.py): overrides the model's mup_base_dim when given
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
    log_to: str | None = None  # "tensorboard,wandb": the records also to TensorBoard / W&B (trainer.metric_sinks)
    eval_every: int = 0
    eval_task: list[str] = field(default_factory=list)  # NAME=PATH as `evals.run --task` (trainer.eval_tasks)
    eval_limit: int | None = None
    eval_batch_size: int = 16
    val_shards: Path | None = None
    val_holdout_files: int = 0
    val_batches: int = 8
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    async_checkpoint: bool = False  # write checkpoints while training goes on (trainer.checkpoint)
    resume: bool = False
    overwrite: bool = False  # --out with a previous run: refused unless --resume or --overwrite (trainer.rerun)
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
    scratch: Path | None = None  # a node-local folder for the copies of URL inputs and outputs (trainer/store.py)
    shard_cache_mb: int = 4096  # a store --shards: the node's cache of range reads (trainer/shard_store.py)
    shard_block_kb: int = 0  # bytes per range read (0: auto)
    verify_shards: bool = True
    # How the ranks split the work (trainer/mesh.py): their product is the world size.
    dp_replicate: int = 1  # HSDP: model replicas (e.g. one per node), all-reduced
    dp_shard: int = -1  # FSDP shards per replica; -1: the ranks the other degrees leave
    tp: int = 1  # tensor + sequence parallel degree (within a node)
    pp: int = 1  # pipeline stages
    cp: int = 1  # context parallel degree (ring attention; CUDA only)
    ep: int = 1  # expert parallel degree: a split of dp_shard (MoE models)
    pp_schedule: PPSchedule = "1F1B"

    def check(self) -> None:
        """What types cannot say, before any work: counts and rates in range, an `--out` that can be written
        (a ValueError, one line, raised on every rank alike)."""
        from common.lock import check_apart, check_writable

        at_least = {"micro_batch": 1, "grad_accum": 1, "log_every": 1, "keep_checkpoints": 1, "vocab_multiple": 1,
                    "val_batches": 0, "val_holdout_files": 0, "eval_every": 0, "checkpoint_every": 0,
                    "eval_batch_size": 1, "shard_cache_mb": 0, "shard_block_kb": 0}  # fmt: skip
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}")
        for name in ("seq_len", "max_steps", "global_batch_tokens", "eval_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.seq_len is not None and self.seq_len > MAX_SEQ_LEN:
            raise ValueError(f"--seq-len must be <= {MAX_SEQ_LEN}, got {self.seq_len}")
        check_optim(self.optim)
        check_scratch(self.scratch)
        if self.eval_task and (self.tp > 1 or self.pp > 1):
            raise ValueError("--eval-task runs under FSDP / HSDP layouts only (--tp 1 --pp 1)")
        if self.device not in ("auto", "cpu", "cuda"):  # anything else trained on the CPU without a word
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        # checkpoints among the shards, or inputs under --out: --overwrite removed the --init-from checkpoint
        # there (then failed on it), and a run wrote its checkpoints into its --val-shards
        inputs = {"--shards": self.shards, "--val-shards": self.val_shards, "--init-from": self.init_from}
        check_apart(self.out, {flag: path for flag, path in inputs.items() if path is not None})
        check_writable(self.out)


HELP: dict[str, str] = {
    "shards": "token shards to train on: a mixtures.build output folder (its manifest.json)",
    "tokenizer": "the tokenizer the shards were encoded with (tokenizer.json, or its folder)",
    "out": "run folder: metrics.jsonl, run_config.json, checkpoints/, hf/; a folder holding a previous run is "
    "refused unless --resume or --overwrite",
    "model": "a preset (tiny, 125M, 350M, 1B, 7B) or a YAML/JSON file of ModelConfig fields (trainer/config.py)",
    "dim": "model width; with --n-layers --n-heads --n-kv-heads --ffn-dim overrides the --model preset's shape "
    "(default: the preset's)",
    "n_layers": "transformer blocks (default: the preset's)",
    "n_heads": "attention heads (default: the preset's)",
    "n_kv_heads": "key/value heads, < --n-heads for grouped-query attention (default: the preset's)",
    "ffn_dim": "SwiGLU hidden width (default: the preset's)",
    "qk_norm": "RMSNorm on queries and keys before attention (OLMo 2's stabiliser)",
    "untied": "separate input embedding and output head (--no-untied: one matrix for both)",
    "moe_experts": "mixture of experts: E SwiGLU experts in every --moe-every-th block's MLP (0: dense)",
    "moe_top_k": "experts each token is routed to",
    "moe_every": "layer i is a MoE layer when (i + 1) %% N == 0 (1: every layer)",
    "moe_capacity": "capacity factor: an expert takes at most ceil(c * tokens * top_k / E) assignments per "
    "forward in training, the rest are dropped and counted (0: dropless)",
    "moe_ffn_dim": "hidden size of each expert (default: --ffn-dim)",
    "moe_gate": "softmax (Mixtral) or sigmoid (DeepSeek-V3) gate scores, renormalised over the top k",
    "moe_balance": "aux: Switch/Mixtral auxiliary loss (x --moe-aux-coef); bias: DeepSeek-V3's selection "
    "bias moved by --moe-bias-rate each step, no auxiliary loss; none",
    "moe_aux_coef": "weight of the load-balancing auxiliary loss with --moe-balance aux (default 0.01)",
    "moe_bias_rate": "step of the selection-bias update with --moe-balance bias (default 1e-3)",
    "moe_shared_expert": "one more SwiGLU every token passes through (DeepSeek-MoE)",
    "mup_base_dim": "μP with this base width D (trainer/mup.py): hidden matrices drawn with std / sqrt(m) and "
    "trained at lr / m (Muon: lr / sqrt(m)), logits x 1/m, attention scores / head_dim, where m = dim / D, so an "
    "--lr tuned at width D transfers; must divide --dim (0: off, the standard parametrisation)",
    "optimizer": "adamw, or muon: Muon (Newton-Schulz orthogonalised momentum, RMS matched to AdamW so --lr "
    "carries over) on the hidden matrices, AdamW on the embedding, head and norms (trainer/muon.py)",
    "muon_momentum": "Muon's Nesterov momentum",
    "muon_qk_clip": "MuonClip (Kimi K2) with this tau: after each step, the query/key weights of every attention "
    "head whose largest logit q.k / sqrt(head_dim) in the step exceeded tau are scaled so it is tau "
    "(trainer/qk_clip.py; needs --optimizer muon, not with --qk-norm); 0: off",
    "document_masking": "attention does not cross <|endoftext|> inside a window and positions restart per "
    "document (an SDPA mask: slower than plain causal attention)",
    "vocab_multiple": "pad the model vocabulary up to a multiple of this (1: no padding); GPUs prefer 64",
    "seq_len": "tokens per training window (default: the manifest's)",
    "global_batch_tokens": "tokens per optimizer step; derives --grad-accum (and lowers --micro-batch "
    "to a divisor if needed) from --seq-len and the number of ranks; --micro-batch is the upper bound",
    "micro_batch": "sequences per rank per forward/backward",
    "grad_accum": "micro-batches accumulated per optimizer step",
    "lr": "peak learning rate (AdamW)",
    "weight_decay": "AdamW weight decay, on matrices only (not on norm gains)",
    "warmup_steps": "linear warmup steps (default, or 0: min(2000, 5%% of the schedule's steps))",
    "schedule": "LR decay after warmup (trainer/schedule.py)",
    "min_lr_ratio": "the LR decays to this fraction of --lr",
    "wsd_decay_fraction": "--schedule wsd: fraction of the steps spent decaying at the end",
    "grad_clip": "clip the global gradient norm to this (0: no clipping)",
    "z_loss": "weight of the z-loss on the output logits' log-partition (0: off)",
    "betas": "AdamW (beta1, beta2)",
    "seed": "model initialisation and data order",
    "bf16": "bf16 autocast for the forward/backward (fp32 master weights); --no-bf16 trains in fp32",
    "ac": "activation checkpointing: none, selective (attention) or full (every block)",
    "compile": "torch.compile each transformer block",
    "log_every": "write loss, grad norm, LR, tokens/s and MFU to metrics.jsonl every N steps",
    "eval_every": "every N steps: the validation loss (with a held-out set) and the --eval-task tasks (0: only "
    "at the end)",
    "eval_task": "NAME=PATH, repeatable: bpb, blimp or mc on its file (as python -m evals.run --task), on the "
    "sharded model every --eval-every steps and at the end; figures into metrics.jsonl",
    "eval_limit": "at most N items of each --eval-task at each evaluation, spread evenly over the file (default: all)",
    "eval_batch_size": "sequences per forward in --eval-task evaluation",
    "val_shards": "validation token shards, a mixtures.build folder (default: --val-holdout-files, or no validation)",
    "val_holdout_files": "hold out the last N shard files of --shards as the validation set",
    "val_batches": "micro-batches per rank in each validation loss",
    "checkpoint_every": "save a sharded checkpoint every N steps (and always at the end); 0: only at the end",
    "keep_checkpoints": "keep the newest N checkpoints",
    "async_checkpoint": "write each checkpoint in the background (DCP async_save: the state is copied to CPU "
    "memory, training goes on); it is committed (checksums.json, rename) once every rank's write is complete, "
    "and the next save or the end of the run waits for it (a store --out: then uploads it)",
    "resume": "continue the run in --out from its newest checkpoint (same shards and batch)",
    "stop_file": "checkpoint the current step and stop once this file appears (trainer.slurm's preemption signal)",
    "overwrite": "remove the previous run's outputs in --out (metrics, config, checkpoints, hf/) and start at step 0",
    "init_from": "start this run (a new phase, e.g. an anneal on another mixture) from the weights of a "
    "trainer checkpoint step_* dir or an exported HF folder; data position and LR schedule start at 0",
    "init_optimizer": "with --init-from a checkpoint: also load its AdamW state",
    "max_steps": "stop after this many optimizer steps (default: exactly one epoch of the shards); "
    "the LR schedule still spans the whole epoch unless --schedule-span max_steps",
    "schedule_span": "epoch: warmup/decay over the whole epoch; max_steps: over --max-steps (a short run decays fully)",
    "spike_guard": "skip an update whose loss or grad norm is not finite or > mean + sigma*std of the last "
    "--spike-window accepted steps (OLMo-core's defaults: 128, 6); a 'spike' record goes to metrics.jsonl",
    "spike_window": "accepted steps the spike guard's mean and std are taken over",
    "spike_sigma": "a loss or grad norm this many standard deviations above the window's mean is a spike",
    "spike_rollback_after": "after this many skipped steps in a row reload the last checkpoint "
    "(keeping the data position); 0: never",
    "export_hf": "at the end of the epoch write a transformers checkpoint to OUT/hf/",
    "gpu": "accelerator whose datasheet peak MFU is measured against (h100, h200, a100, cpu, cpu-probe; "
    "auto: detected)",
    "device": "cuda or cpu (auto: cuda when available)",
    "save_data_indices": "record the window ids each rank trained on per step, in OUT/data_indices/",
    "profile_steps": "A:B: torch.profiler Chrome trace of optimizer steps A..B (1-based), one per rank, "
    "with shapes and memory, in OUT/profile/",
    "oom_snapshot": "CUDA: record allocator history; dump OUT/profile/oom_rankR.pickle when a step runs out of memory",
    "scratch": "node-local folder where URL --shards/--tokenizer/--out are staged (default: the system temp dir); "
    "removed at the end",
    "shard_cache_mb": "--shards/--val-shards on a store: each node keeps the blocks it reads in a cache of this "
    "size in --scratch, least recently used dropped first (0: no cache); the node never holds the whole mixture",
    "shard_block_kb": "--shards on a store: bytes per range read, rounded to whole windows (0: auto, 1024 when the "
    "mixture fits in --shard-cache-mb, else one window: exactly the windows the run reads are fetched)",
    "verify_shards": "check every shard file's sha256 against the manifest before training (--shards on a store: "
    "rank 0 streams every file once; --no-verify-shards fetches only what the run reads, sizes still checked)",
    "dp_replicate": "HSDP: model replicas (e.g. one per node), all-reduced",
    "dp_shard": "FSDP shards per replica (-1: the ranks the other degrees leave)",
    "tp": "tensor + sequence parallel degree (within a node)",
    "pp": "pipeline stages",
    "cp": "context parallel degree (ring attention; CUDA only)",
    "ep": "expert parallel degree (MoE): the experts split over this many of the dp_shard ranks, tokens sent "
    "to them by all-to-all; must divide dp_shard and the expert count",
    "pp_schedule": "pipeline schedule (with --pp > 1)",
    "log_to": "tensorboard,wandb: every metrics.jsonl record's numeric fields also as TensorBoard scalars in "
    "OUT/tensorboard/ and/or a Weights & Biases run in OUT/wandb/ (offline unless WANDB_MODE=online; rank 0)",
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


def check_optim(optim: OptimConfig) -> None:
    """The optimizer's flags in range (pretraining and SFT alike): `--lr inf` trained NaNs and exited 0."""
    finite = all(math.isfinite(v) for v in (optim.lr, optim.weight_decay, optim.grad_clip))  # inf trains NaNs
    if not finite or not optim.lr > 0 or not optim.weight_decay >= 0 or not optim.grad_clip >= 0:
        raise ValueError(f"--lr must be > 0, --weight-decay and --grad-clip >= 0, got {optim.lr}, "
                         f"{optim.weight_decay}, {optim.grad_clip}")  # fmt: skip
    if not 0 <= optim.min_lr_ratio <= 1 or not all(0 <= b < 1 for b in optim.betas):
        raise ValueError(f"--min-lr-ratio must be in [0, 1] and --betas in [0, 1), got {optim.min_lr_ratio}, "
                         f"{optim.betas}")  # fmt: skip
    if not 0 <= optim.muon_momentum < 1:
        raise ValueError(f"--muon-momentum must be in [0, 1), got {optim.muon_momentum}")
    if not (math.isfinite(optim.muon_qk_clip) and optim.muon_qk_clip >= 0):
        raise ValueError(f"--muon-qk-clip must be >= 0 (0: off), got {optim.muon_qk_clip}")
    warmup, decay, z_loss = optim.warmup_steps or 0, optim.wsd_decay_fraction, optim.z_loss
    if not warmup >= 0 or not 0 <= decay <= 1 or not 0 <= z_loss < math.inf:
        raise ValueError(f"--warmup-steps must be >= 0, --wsd-decay-fraction in [0, 1] and --z-loss >= 0, got "
                         f"{optim.warmup_steps}, {optim.wsd_decay_fraction}, {optim.z_loss}")  # fmt: skip


def check_scratch(scratch: Path | str | None) -> None:
    """`--scratch` is where this node stages the store's copies: a URL there became the local folder
    ``./s3:/bucket/...`` (pathlib folds ``//``), written beside the working directory instead of refused."""
    if scratch is not None and is_remote(str(scratch)):
        raise ValueError(f"--scratch {scratch}: must be a node-local folder, not a URL (the store's copies go there)")


def path_or_url(text: str) -> Path | str:
    """A path flag's value: a ``pathlib.Path``, or the URL itself for a store (``s3://...``)."""
    return text if is_remote(text) else Path(local_path(text))


def _add_flag(parser: argparse.ArgumentParser, name: str, hint: Any, default: Any) -> None:
    flag = "--" + name.replace("_", "-")
    kw: dict[str, Any] = {"help": HELP[name]}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: optional, type X
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if hint is Path:  # an fsspec URL stays a string: pathlib would fold s3://b/k into the local s3:/b/k
        hint = path_or_url
    if default is MISSING:
        parser.add_argument(flag, type=hint, required=True, default=argparse.SUPPRESS, **kw)
    elif hint is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, **kw)
    elif typing.get_origin(hint) is typing.Literal:
        parser.add_argument(flag, choices=list(typing.get_args(hint)), default=default, **kw)
    elif typing.get_origin(hint) is list:  # repeatable, e.g. --eval-task bpb=a --eval-task blimp=b
        parser.add_argument(flag, type=typing.get_args(hint)[0], action="append", default=default, **kw)
    elif typing.get_origin(hint) is tuple:  # fixed-length numbers, e.g. --betas 0.9 0.95
        args = typing.get_args(hint)
        parser.add_argument(flag, type=flag_type(name, args[0]), nargs=len(args), default=default,
                            metavar=name.upper(), **kw)  # fmt: skip
    else:
        parser.add_argument(flag, type=flag_type(name, hint), default=default, **kw)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every flag's default after its text (a None default is said
    in the text itself: what the flag falls back to)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def parse_args(argv: list[str] | None = None, description: str | None = None) -> TrainConfig:
    """CLI flags mirror TrainConfig fields (underscores -> dashes; booleans as --flag / --no-flag)."""
    parser = ArgumentParser(description=description, formatter_class=HelpFormatter)
    for name, hint, default in _flag_fields():
        _add_flag(parser, name, hint, default)
    values = vars(parser.parse_args(argv))
    optim = OptimConfig(**{name: values.pop(name) for name in OPTIM_FLAGS})
    optim = replace(optim, betas=tuple(optim.betas))
    return TrainConfig(**values, optim=optim)
