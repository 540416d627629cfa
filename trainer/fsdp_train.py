"""Train a Llama-style model for exactly one epoch over token shards with FSDP2.

    torchrun --nproc_per_node=2 trainer/fsdp_train.py --shards out/mix --tokenizer out/tok/tokenizer.json \
        --model tiny --out out/train

Pipelines call `train(TrainConfig(...))` in-process instead (one rank, no torchrun needed).
Outputs under --out: metrics.jsonl, checkpoints/step_*/ (DCP), hf/ (transformers checkpoint).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make `trainer` and `mixtures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from tqdm import tqdm

from mixtures.manifest import ManifestError, read_manifest
from mixtures.reader import ShardReader
from trainer.checkpoint import Checkpointer
from trainer.compat import check_compatible, check_same_layout, tokenizer_identity
from trainer.config import PRESETS, ModelConfig, get_preset
from trainer.data import EpochLoader, EpochPlan, WindowIndex, validation_batches
from trainer.distributed import DistInfo, init_distributed, shutdown
from trainer.engine import OptimConfig, TrainEngine
from trainer.export_hf import export_hf
from trainer.metrics import MetricsLogger, flops_per_token, peak_flops, peak_memory_gib
from trainer.parallelize import ACMode
from trainer.schedule import ScheduleKind, default_warmup

log = logging.getLogger("trainer")


@dataclass
class TrainConfig:
    """Everything a run needs; the CLI flags are these fields."""

    shards: Path
    tokenizer: Path
    out: Path
    model: str = "tiny"
    qk_norm: bool = False
    untied: bool = False
    seq_len: int | None = None  # default: the manifest's seq_len
    micro_batch: int = 8
    grad_accum: int = 1
    lr: float = 3e-4
    weight_decay: float = 0.1
    warmup_steps: int | None = None  # default: min(2000, 5 % of the epoch)
    schedule: ScheduleKind = "cosine"
    min_lr_ratio: float = 0.1
    wsd_decay_fraction: float = 0.2
    grad_clip: float = 1.0
    z_loss: float = 0.0
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


@dataclass
class TrainResult:
    """What a finished (or stopped) run reports back to its caller."""

    steps_done: int
    epoch_steps: int
    losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    checkpoint: Path | None
    hf_dir: Path | None


def _open_shards(path: Path, verify: bool, info: DistInfo) -> ShardReader:
    """Rank 0 checksums the shards once; every rank then maps them without re-hashing."""
    error = [None]
    if verify and info.is_main:
        try:
            read_manifest(path, verify=True)
        except ManifestError as err:
            error[0] = str(err)
    dist.broadcast_object_list(error, src=0)
    if error[0]:
        raise ManifestError(error[0])
    return ShardReader(path, verify=False)


def _setup_logging(info: DistInfo) -> None:
    logging.basicConfig(
        level=logging.INFO if info.is_main else logging.WARNING,
        format=f"[rank{info.rank}] %(asctime)s %(name)s: %(message)s",
        stream=sys.stdout,
        force=True,
    )


def train(cfg: TrainConfig) -> TrainResult:
    """Run (or resume) the epoch; collective over the current torchrun job, or one rank in-process."""
    info = init_distributed(cfg.device)
    try:
        return _train(cfg, info)
    finally:
        shutdown(info)


@dataclass
class _Data:
    """The shards resolved against the tokenizer and model: what the loop consumes."""

    model_cfg: ModelConfig
    tokenizer_file: Path
    tokenizer_sha256: str
    eos_id: int
    bos_id: int | None
    plan: EpochPlan
    loader: EpochLoader
    val: list[torch.Tensor]


def _prepare_data(cfg: TrainConfig, info: DistInfo) -> _Data:
    """Open and check the shards, size the model's vocab, cut the epoch and the held-out set."""
    reader = _open_shards(Path(cfg.shards), cfg.verify_shards, info)
    manifest = reader.manifest
    seq_len = cfg.seq_len or manifest.seq_len
    if seq_len != manifest.seq_len:
        log.warning("training at seq_len %d, shards were prepared for %d", seq_len, manifest.seq_len)
    tok = tokenizer_identity(cfg.tokenizer)
    base = get_preset(cfg.model, qk_norm=cfg.qk_norm or None, tie_embeddings=False if cfg.untied else None)
    model_cfg = base.with_vocab(tok.vocab_size)
    if model_cfg.max_seq_len < seq_len:
        model_cfg = replace(model_cfg, max_seq_len=seq_len)
    check_compatible(manifest, tok, model_cfg.vocab_size)

    n_files = len(reader)
    if cfg.val_holdout_files >= n_files:
        raise ValueError(f"cannot hold out {cfg.val_holdout_files} of {n_files} shard files")
    n_train = n_files - cfg.val_holdout_files
    index = WindowIndex(reader, seq_len, list(range(n_train)))
    val_index = None
    if cfg.val_shards is not None:
        val_reader = _open_shards(Path(cfg.val_shards), cfg.verify_shards, info)
        check_same_layout(manifest, val_reader.manifest)
        val_index = WindowIndex(val_reader, seq_len)
    elif cfg.val_holdout_files:
        val_index = WindowIndex(reader, seq_len, list(range(n_train, n_files)))
    val = []
    if val_index is not None:
        val = validation_batches(val_index, cfg.micro_batch, cfg.val_batches, info.rank, info.world_size)
    plan = EpochPlan(index.num_windows, cfg.micro_batch, cfg.grad_accum, info.world_size, seq_len)
    loader = EpochLoader(index, plan, info.rank, cfg.seed)
    info_t = manifest.tokenizer
    return _Data(model_cfg, tok.path, tok.sha256, info_t.eos_id, info_t.bos_id, plan, loader, val)


def _build_engine(cfg: TrainConfig, info: DistInfo, data: _Data) -> TrainEngine:
    optim = OptimConfig(
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        grad_clip=cfg.grad_clip,
        schedule=cfg.schedule,
        warmup_steps=cfg.warmup_steps or default_warmup(data.plan.steps),
        min_lr_ratio=cfg.min_lr_ratio,
        decay_fraction=cfg.wsd_decay_fraction,
        z_loss=cfg.z_loss,
    )
    engine = TrainEngine(
        data.model_cfg,
        info,
        optim,
        data.plan.steps,
        seed=cfg.seed,
        bf16=cfg.bf16,
        ac=cfg.ac,
        compile=cfg.compile,
    )
    log.info("model %s: %.2fM params, %s", cfg.model, data.model_cfg.num_params() / 1e6, data.model_cfg)
    return engine


def _run_meta(cfg: TrainConfig, data: _Data) -> dict[str, Any]:
    """What a checkpoint needs to be exported on its own (written next to every checkpoint)."""
    return {
        "model_config": data.model_cfg.to_dict(),
        "tokenizer": {
            "path": str(data.tokenizer_file.resolve()),
            "sha256": data.tokenizer_sha256,
            "eos_id": data.eos_id,
            "bos_id": data.bos_id,
        },
        "train_config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
    }


def _train(cfg: TrainConfig, info: DistInfo) -> TrainResult:
    _setup_logging(info)
    out = Path(cfg.out)
    data = _prepare_data(cfg, info)
    plan, loader = data.plan, data.loader
    engine = _build_engine(cfg, info, data)
    ckpt = Checkpointer(out / "checkpoints", cfg.keep_checkpoints)
    latest = ckpt.latest() if cfg.resume else None
    if latest is not None:
        state = ckpt.load(latest, engine.model, engine.optimizer, engine.scheduler, loader.state_dict())
        loader.load_state_dict(state)
        log.info("resumed from %s at step %d", latest, loader.step)
    meta = _run_meta(cfg, data)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "run_config.json").write_text(json.dumps(meta, indent=1, default=str))

    metrics = MetricsLogger(out / "metrics.jsonl", info.is_main)
    indices = _IndexWriter(out / "data_indices", info.rank) if cfg.save_data_indices else None
    throughput = _Throughput(data.model_cfg, plan, cfg.gpu, info, loader.step)
    losses: list[tuple[int, float]] = []
    val_losses: list[tuple[int, float]] = []
    last_saved = loader.step if latest is not None else -1
    stop = cfg.max_steps if cfg.max_steps is not None else plan.steps
    # rank 0 only; tqdm turns itself off when stderr is not a terminal (logs, CI)
    bar = tqdm(total=stop, initial=loader.step, desc="training", unit="step", disable=None if info.is_main else True)
    for micro in loader:
        step = loader.step  # steps completed once this batch is applied (1-based)
        result = engine.train_step([tokens for _, tokens in micro])
        bar.update(1)
        if indices is not None:
            indices.write(step, [ids for ids, _ in micro])
        if step % cfg.log_every == 0 or step in (1, plan.steps, stop):
            losses.append((step, float(result.loss)))
            metrics.log(
                {
                    "step": step,
                    "loss": losses[-1][1],
                    "grad_norm": float(result.grad_norm),
                    "lr": result.lr,
                    **throughput.measure(step),
                }
            )
        if data.val and cfg.eval_every and step % cfg.eval_every == 0:
            val_losses.append((step, engine.evaluate(data.val)))
            metrics.log({"step": step, "val_loss": val_losses[-1][1]})
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, loader.state_dict(), meta)
            last_saved = step
        if step >= stop:
            break
    bar.close()

    step = loader.step
    if data.val and (not val_losses or val_losses[-1][0] != step):
        val_losses.append((step, engine.evaluate(data.val)))
        metrics.log({"step": step, "val_loss": val_losses[-1][1]})
    if last_saved != step:
        ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, loader.state_dict(), meta)
    hf_dir = None
    if cfg.export_hf and step == plan.steps:
        hf_dir = _export(engine, data, out / "hf", data.tokenizer_file, info)
    metrics.close()
    if indices is not None:
        indices.close()
    return TrainResult(step, plan.steps, losses, val_losses, ckpt.latest(), hf_dir)


class _Throughput:
    """tokens/s, MFU and peak memory since the previous measurement."""

    def __init__(self, model_cfg: ModelConfig, plan: EpochPlan, gpu: str, info: DistInfo, step: int) -> None:
        self.plan, self.info = plan, info
        self.flops_per_token = flops_per_token(model_cfg, plan.seq_len)
        name, self.peak = peak_flops(gpu, info.device)
        log.info("%.3g FLOPs/token; peak %s = %.3g FLOP/s per device", self.flops_per_token, name, self.peak)
        self.t_last, self.step_last = time.perf_counter(), step

    def measure(self, step: int) -> dict[str, float]:
        now = time.perf_counter()
        tok_s = (step - self.step_last) * self.plan.tokens_per_step / (now - self.t_last)
        self.t_last, self.step_last = now, step
        return {
            "tokens": step * self.plan.tokens_per_step,
            "tokens_per_s": tok_s,
            "mfu": tok_s * self.flops_per_token / (self.peak * self.info.world_size),
            "peak_mem_gib": peak_memory_gib(self.info.device),
        }


def _export(engine: TrainEngine, data: _Data, out: Path, tokenizer: Path, info: DistInfo) -> Path:
    """Gather full weights to rank 0 (collective) and write the HF checkpoint there."""
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(engine.model, options=opts)
    if info.is_main:
        export_hf(weights, data.model_cfg, out, tokenizer=tokenizer, eos_id=data.eos_id, bos_id=data.bos_id)
        log.info("exported Hugging Face checkpoint to %s", out)
    dist.barrier()
    return out


class _IndexWriter:
    """Which windows each rank trained on at each step (the data order audit trail, as in OLMo)."""

    def __init__(self, root: Path, rank: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.file = (root / f"rank{rank}.jsonl").open("a")

    def write(self, step: int, micro_ids: list[Any]) -> None:
        self.file.write(json.dumps({"step": step, "windows": [[int(w) for w in ids] for ids in micro_ids]}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """CLI flags mirror TrainConfig fields (underscores -> dashes; booleans as --flag / --no-flag)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = TrainConfig(shards=Path(), tokenizer=Path(), out=Path())
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name in ("shards", "tokenizer", "out"):
            parser.add_argument(flag, type=Path, required=True)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif f.name == "model":
            parser.add_argument(flag, choices=sorted(PRESETS), default=default)
        elif f.name == "ac":
            parser.add_argument(flag, choices=["none", "selective", "full"], default=default)
        elif f.name == "schedule":
            parser.add_argument(flag, choices=["cosine", "wsd"], default=default)
        else:
            kind = {"val_shards": Path, "seq_len": int, "warmup_steps": int, "max_steps": int}.get(
                f.name, type(default)
            )
            parser.add_argument(flag, type=kind, default=default)
    return TrainConfig(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    result = train(parse_args(argv))
    if os.environ.get("RANK", "0") == "0":
        final = result.losses[-1][1] if result.losses else None
        print(json.dumps({"steps_done": result.steps_done, "epoch_steps": result.epoch_steps, "final_loss": final}))


if __name__ == "__main__":
    main()
