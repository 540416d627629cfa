"""Supervised fine-tuning: a base model learns to answer, the loss on the assistant's tokens only.

    python -m trainer.sft --base out/train/hf --data ../shared/data/instructions/train.jsonl.gz \
        --out out/sft --val-holdout 200 --eval-every 50 --lr 1e-4 --epochs 1
    torchrun --nproc_per_node=2 -m trainer.sft ...   # the same run on 2 ranks (FSDP2)

`--base`: an exported HF folder, a trainer `--out` folder (its hf/, else its newest checkpoint) or a
checkpoint `step_*` folder; its tokenizer must hold the chat tokens (`tokenizer.chat`). `--data`:
JSONL(.gz) conversations (`trainer.sft_data`). `--base`, `--data`, `--val-data`, `--tokenizer` and `--out`
may be store URLs (`s3://...`), staged in a node-local `--scratch` as the pretraining run's are
(`trainer/store.py`: of a trainer `--out` on the store only its hf/ or newest committed checkpoint is
fetched; checkpoints are committed on the store by their manifest; the records and the export follow).
The run is the pretraining engine's: the same FSDP2 model (`trainer.engine.TrainEngine`), AdamW and
schedule, spike guard, DCP checkpoints with exact `--resume`, `metrics.jsonl`, the HF export (plus
`generation_config.json`, which stops at `<|end|>`).

The loss of a step is the mean over every response token of the global batch (all micro-batches and
ranks), so packing, padding, accumulation and the rank count do not change it: each micro-batch adds
its summed response NLL / the step's response-token count (x world size, as FSDP averages gradients).
Rows: conversations are shuffled by `--seed`, packed into rows of `--seq-len + 1` tokens (or one
per row with `--no-pack`); document masking at `<|endoftext|>` keeps packed conversations apart.
The epoch order is a permutation of rows per epoch, and the data state is the step: resume is exact.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args

if __package__ in (None, ""):  # run as a script by torchrun
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.lifetime import die_with_launcher  # noqa: E402

die_with_launcher()  # first: a rank whose launcher dies while it imports torch must not run on

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402

from common.cli import USAGE_ERROR, ArgumentParser, integer, one_line, real  # noqa: E402
from common.storage import is_remote  # noqa: E402
from common.transfer import download_input  # noqa: E402
from tokenizer.artifacts import load_tokenizer  # noqa: E402
from trainer.checkpoint import TRAINER_STATE, Checkpointer  # noqa: E402
from trainer.config import MAX_SEQ_LEN, SHAPE_LIMITS, ModelConfig  # noqa: E402
from trainer.distributed import DistInfo, all_reduce_mean, init_distributed, shutdown  # noqa: E402
from trainer.engine import TrainEngine  # noqa: E402
from trainer.export_hf import export_hf, export_live, model_config_from_hf  # noqa: E402
from trainer.init_from import init_from  # noqa: E402
from trainer.loop import _setup_logging  # the pretraining run's log format, rank 0 at INFO  # noqa: E402
from trainer.lora import LoRASpec  # noqa: E402
from trainer.metrics import MetricsLogger  # noqa: E402
from trainer.optim import OptimConfig, OptimizerKind  # noqa: E402
from trainer.output_lock import lock_output  # noqa: E402
from trainer.parallelize import set_gradient_sync  # noqa: E402
from trainer.pipeline_parallel import clip_grad_norm  # noqa: E402
from trainer.schedule import ScheduleKind  # noqa: E402
from trainer.sft_data import ChatEncoder, Rows, SFTDataError, encode_rows, read_conversations, split_held_out  # noqa: E402
from trainer.stability import SpikeConfig, SpikeGuard  # noqa: E402
from trainer.store import StoreRun, fetch_model, on_each_node, scratch_folder, staged  # noqa: E402
from trainer.train_config import FLAG_RANGES, check_optim, check_scratch, flag_type, path_or_url  # noqa: E402

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    """An SFT run; the CLI flags are these fields (and `optim`'s, spelled out)."""

    base: Path
    data: Path
    out: Path
    tokenizer: Path | None = None  # default: the base's
    val_data: Path | None = None
    val_holdout: int = 0  # conversations of --data held out (after the seeded shuffle)
    seq_len: int | None = None  # default: the base model's max_seq_len
    pack: bool = True
    micro_batch: int = 4
    grad_accum: int = 1
    epochs: int = 1
    max_steps: int | None = None
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4, weight_decay=0.0, warmup_steps=10))
    seed: int = 0
    bf16: bool = True
    log_every: int = 10
    eval_every: int = 0
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    export_hf: bool = True
    spike_guard: bool = True
    device: str = "auto"
    lora_rank: int = 0  # 0: full fine-tuning; else LoRA adapters of this rank on --lora-targets (trainer.lora)
    lora_alpha: float = 16.0
    lora_targets: str = "wq,wk,wv,wo"
    scratch: Path | None = None  # a node-local folder for the copies of URL flags (trainer/store.py)

    def lora(self) -> LoRASpec | None:
        return LoRASpec.parse(self.lora_rank, self.lora_alpha, self.lora_targets) if self.lora_rank else None

    def check(self) -> None:
        from common.lock import check_writable

        for name in ("micro_batch", "grad_accum", "epochs", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("val_holdout", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if (self.seq_len is not None and self.seq_len < 2) or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError("--seq-len must be >= 2 and --max-steps >= 1")
        check_optim(self.optim)  # --lr inf fine-tuned to NaNs and exited 0
        check_scratch(self.scratch)
        if self.lora_rank < 0:
            raise ValueError(f"--lora-rank must be >= 0, got {self.lora_rank}")
        self.lora()  # a bad LoRA setting is refused now
        if self.device not in ("auto", "cpu", "cuda"):  # anything else fine-tuned on the CPU without a word
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        self.check_apart()
        if not is_remote(str(self.out)):
            check_writable(self.out)

    def check_apart(self) -> None:
        """--out neither the --base folder, inside it nor holding it, and holding none of the input files: the
        run wrote its checkpoints and hf/ among the base's files, or beside the conversations, and exited 0."""
        out = _place(self.out)
        base = _place(self.base)
        if out == base or out.startswith(base + "/") or base.startswith(out + "/"):
            raise ValueError(f"--out {self.out}: an output folder must be apart from the --base folder ({self.base})")
        for flag in ("data", "val_data", "tokenizer"):
            value = getattr(self, flag)
            if value is not None and (_place(value) + "/").startswith(out + "/"):
                raise ValueError(f"--out {self.out}: an output folder must not hold the --{flag.replace('_', '-')} "
                                 f"file ({value})")  # fmt: skip

    def urls(self) -> list[str]:
        """The flags given as store URLs."""
        return [name for name in (*SFT_INPUTS, "out") if is_remote(str(getattr(self, name)))]


SFT_INPUTS = ("base", "data", "val_data", "tokenizer")  # the flags that may be URLs, besides --out


def _place(path: Path | str) -> str:
    """A flag's place, comparable by prefix: a URL as written, a local path resolved (links followed)."""
    return str(path).rstrip("/") if is_remote(str(path)) else os.path.realpath(path)


@dataclass(frozen=True)
class Base:
    """The model to fine-tune: where its weights are, its shape and its tokenizer."""

    weights: Path  # an HF folder or a checkpoint step folder (what `init_from` reads)
    model_cfg: ModelConfig
    tokenizer: Path
    bos_id: int | None


def _check_weights(file: Path) -> None:
    """The base's weights file readable, by its header (the tensors are read once the run has begun: a
    truncated file was a traceback there, after --out was locked)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            handle.keys()
    except (SafetensorError, OSError) as err:
        raise SFTDataError(f"--base {file}: not readable safetensors ({err})") from None


def resolve_base(path: Path, tokenizer: Path | None = None) -> Base:
    """An HF folder, a checkpoint `step_*` folder, or a trainer `--out` (its hf/, else its newest checkpoint)."""
    path = Path(path)
    if (path / "hf" / "config.json").is_file():
        path = path / "hf"
    elif (path / "checkpoints").is_dir() and not (path / "config.json").is_file():
        steps = Checkpointer(path / "checkpoints").complete()
        if steps:
            path = steps[-1]
    if (path / "config.json").is_file():
        config = json.loads((path / "config.json").read_text())
        cfg = model_config_from_hf(config)
        if cfg is None:
            raise SFTDataError(f"--base {path}: a model config this trainer cannot represent")
        _check_weights(path / "model.safetensors")
        return Base(path, cfg, Path(tokenizer or path / "tokenizer.json"), config.get("bos_token_id"))
    if (path / TRAINER_STATE).is_file():
        state = json.loads((path / TRAINER_STATE).read_text())
        tok = state.get("tokenizer") or {}
        tok_path = tokenizer or (Path(tok["path"]) if tok.get("path") else None)
        if tok_path is None:
            raise SFTDataError(f"--base {path}: trainer_state.json names no tokenizer; give --tokenizer")
        return Base(path, ModelConfig(**state["model_config"]), Path(tok_path), tok.get("bos_id"))
    raise SFTDataError(f"--base {path}: neither a Hugging Face folder, a checkpoint nor a trainer output")


def response_nll(
    model: nn.Module, tokens: torch.Tensor, mask: torch.Tensor, eot: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed NLL over the response targets, their count) of rows (B, T + 1), conversations kept apart at `eot`."""
    logits = model(tokens[:, :-1], document_eot=eot)
    nll = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    weights = mask[:, 1:].flatten().to(nll.dtype)
    return (nll * weights).sum(), weights.sum()


@dataclass
class RowPlan:
    """Which rows each step, micro-batch and rank takes: a seeded permutation of the rows per epoch."""

    rows: int
    micro_batch: int
    grad_accum: int
    world: int
    epochs: int
    seed: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world

    @property
    def steps_per_epoch(self) -> int:
        return self.rows // self.global_batch

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def step_rows(self, step: int) -> np.ndarray:
        """The global batch of 1-based `step`: (grad_accum, world, micro_batch) row indices."""
        epoch, within = divmod(step - 1, self.steps_per_epoch)
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.rows)
        chosen = perm[within * self.global_batch : (within + 1) * self.global_batch]
        return chosen.reshape(self.grad_accum, self.world, self.micro_batch)

    def identity(self) -> dict[str, int]:
        return {"rows": self.rows, "global_batch": self.global_batch, "seed": self.seed, "epochs": self.epochs}


class SFTRun:
    """The engine, the rows and one step / one evaluation of the response loss."""

    def __init__(self, cfg: SFTConfig, info: DistInfo, base: Base, rows: Rows, val: Rows | None, eot: int) -> None:
        self.cfg, self.info, self.rows, self.val, self.eot = cfg, info, rows, val, eot
        self.plan = RowPlan(len(rows), cfg.micro_batch, cfg.grad_accum, info.world_size, cfg.epochs, cfg.seed)
        if self.plan.steps < 1:
            raise SFTDataError(
                f"{len(rows)} rows make no step of {self.plan.global_batch} rows (micro-batch x accumulation x ranks)"
            )
        # the schedule spans every epoch, --max-steps or not (as pretraining's): a cut run resumes the same curve
        self.lora = cfg.lora()
        adapt = self.lora.apply if self.lora is not None else None
        self.engine = TrainEngine(
            base.model_cfg, info, cfg.optim, self.plan.steps, seed=cfg.seed, bf16=cfg.bf16, adapt=adapt
        )
        self.guard = SpikeGuard(SpikeConfig(True)) if cfg.spike_guard else None

    def step(self, step: int) -> dict[str, float]:
        engine, idx = self.engine, self.plan.step_rows(step)
        count = float(self.rows.mask[idx.flatten()][:, 1:].sum())  # every rank holds the rows: no collective
        engine.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=engine.device)
        scale = self.info.world_size / max(count, 1.0)
        for i, micro in enumerate(idx):
            set_gradient_sync(engine.model, i == len(idx) - 1)
            mine = micro[self.info.rank]
            tokens, mask = self.rows.tokens[mine].to(engine.device), self.rows.mask[mine].to(engine.device)
            nll, _ = response_nll(engine.model, tokens, mask, self.eot)
            loss = nll * scale
            loss.backward()
            total += loss.detach()
        grad_norm = clip_grad_norm(list(engine.model.parameters()), self.cfg.optim.grad_clip, None)
        lr = engine.scheduler.get_last_lr()[0]
        loss = float(all_reduce_mean(total) if self.info.world_size > 1 else total)
        spike = self.guard.check(loss, float(grad_norm)) if self.guard is not None else None
        if spike is None:
            engine.optimizer.step()
        qk = engine.after_update(spike is None)  # MuonClip's QK-clip when on
        engine.scheduler.step()
        record = {"loss": loss, "grad_norm": float(grad_norm), "lr": lr, "targets": count, "skipped": spike is not None}
        return {**record, **(qk.record() if qk is not None else {})}

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean NLL over every held-out response token; each rank scores every world-size-th row."""
        assert self.val is not None
        model, dev, world, b = self.engine.model, self.engine.device, self.info.world_size, self.cfg.micro_batch
        mine = list(range(self.info.rank, len(self.val), world))
        per_rank = -(-len(self.val) // world)
        batches = -(-per_rank // b)
        sums = torch.zeros(2, device=dev, dtype=torch.float64)
        model.eval()
        for k in range(batches):  # every rank runs as many forwards (they are collectives under FSDP)
            chosen = mine[k * b : (k + 1) * b] or [0]
            tokens, mask = self.val.tokens[chosen].to(dev), self.val.mask[chosen].to(dev)
            if not mine[k * b : (k + 1) * b]:
                mask = torch.zeros_like(mask)
            nll, n = response_nll(model, tokens, mask, self.eot)
            sums += torch.stack([nll.double(), n.double()])
        model.train()
        if world > 1:
            torch.distributed.all_reduce(sums)
        return float(sums[0] / sums[1])


@dataclass
class SFTResult:
    steps_done: int
    losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    checkpoint: Path | None
    hf_dir: Path | None
    dropped_too_long: int = 0


def _load_data(cfg: SFTConfig, base: Base, seq_len: int) -> tuple[ChatEncoder, Rows, Rows | None]:
    if not base.tokenizer.is_file():
        raise SFTDataError(f"tokenizer {base.tokenizer} does not exist")
    tok = load_tokenizer(base.tokenizer)  # garbage: a ValueError naming the file (tokenizers: a bare Exception)
    encoder = ChatEncoder(tok, str(base.tokenizer))
    top = max(asdict(encoder.ids).values())
    if top >= base.model_cfg.vocab_size:
        raise SFTDataError(
            f"the chat token id {top} is outside the base model's vocabulary ({base.model_cfg.vocab_size})"
        )
    conversations = read_conversations(cfg.data)
    val_conv = read_conversations(cfg.val_data) if cfg.val_data is not None else []
    train_conv, held = split_held_out(conversations, cfg.val_holdout, cfg.seed)
    rows = encode_rows(train_conv, encoder, seq_len, cfg.pack)
    val_all = held + val_conv
    val = encode_rows(val_all, encoder, seq_len, packed=False) if val_all else None
    return encoder, rows, val


def _meta(cfg: SFTConfig, base: Base, plan: RowPlan, eot: int) -> dict[str, Any]:
    from tokenizer.artifacts import tokenizer_sha256

    record = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}
    return {
        "model_config": base.model_cfg.to_dict(),
        "tokenizer": {
            "path": str(base.tokenizer.resolve()),
            "sha256": tokenizer_sha256(base.tokenizer),
            "eos_id": eot,
            "bos_id": base.bos_id,
        },
        "sft_config": record,
        "sft_data": plan.identity(),
        "base": str(base.weights.resolve()),
    }


def write_generation_config(hf_dir: Path, encoder: ChatEncoder, bos_id: int | None) -> None:
    """generation_config.json: `generate` stops at `<|end|>` (the end of an answer) or `<|endoftext|>`."""
    config = {"bos_token_id": bos_id, "eos_token_id": [encoder.ids.end, encoder.ids.eot], "do_sample": False}
    (hf_dir / "generation_config.json").write_text(json.dumps(config, indent=2) + "\n")


def sft(cfg: SFTConfig) -> SFTResult:
    """Run (or resume) the fine-tuning; collective over the torchrun job, or one rank in-process."""
    cfg.check()
    if cfg.urls():
        return _sft_on_store(cfg)
    prepared = _prepare(cfg)  # bad data fails before any process group or write
    info = init_distributed(cfg.device)
    try:
        _setup_logging(info)
        with ExitStack() as held:
            return _run(cfg, info, *prepared, held)
    finally:
        shutdown(info)


def _prepare(cfg: SFTConfig) -> tuple[Base, ChatEncoder, Rows, Rows | None]:
    """The base model, the chat encoder and the encoded rows (local files); bad input raises here."""
    base = resolve_base(cfg.base, cfg.tokenizer)
    seq_len = cfg.seq_len or base.model_cfg.max_seq_len
    if seq_len > base.model_cfg.max_seq_len:
        raise SFTDataError(f"--seq-len {seq_len} exceeds the base model's max_seq_len {base.model_cfg.max_seq_len}")
    if cfg.lora_rank > base.model_cfg.dim:  # adapters wider than the layers: 128 GB asked for at --lora-rank 1e9
        raise SFTDataError(f"--lora-rank {cfg.lora_rank} exceeds the base model's width {base.model_cfg.dim}")
    return (base, *_load_data(cfg, base, seq_len))


def _sft_on_store(cfg: SFTConfig) -> SFTResult:
    """URL flags: the stores are checked, --out locked, the inputs staged in each node's scratch (all before
    any training), then the run is the local one, its checkpoints, records and export copied to the store."""
    info = init_distributed(cfg.device)
    try:
        _setup_logging(info)
        with (
            staged(cfg, info, SFT_INPUTS, {"base": fetch_model}, "fine-tuning run") as (local, store),
            ExitStack() as held,
        ):
            local = _stage_base_tokenizer(local, cfg, info)
            return _run(local, info, *_prepare(local), held, store)
    finally:
        shutdown(info)


def _stage_base_tokenizer(local: SFTConfig, cfg: SFTConfig, info: DistInfo) -> SFTConfig:
    """A checkpoint base trained on a store names its tokenizer by URL (trainer_state.json): fetched into the
    scratch too, unless --tokenizer is given. Collective."""
    state = Path(local.base) / TRAINER_STATE
    if local.tokenizer is not None or (Path(local.base) / "config.json").is_file() or not state.is_file():
        return local
    url = (json.loads(state.read_text()).get("tokenizer") or {}).get("path")
    if not url or not is_remote(url):
        return local
    target = scratch_folder(cfg) / "base-tokenizer"
    on_each_node(info, lambda: download_input(url, target))
    return replace(local, tokenizer=target / Path(url).name)


def _run(
    cfg: SFTConfig,
    info: DistInfo,
    base: Base,
    encoder: ChatEncoder,
    rows: Rows,
    val: Rows | None,
    held: ExitStack,
    store: StoreRun | None = None,
) -> SFTResult:
    """The run; with `store`, `cfg.out` is its local staging: checkpoints, records and export go to the store."""
    out = Path(cfg.out)
    eot = encoder.ids.eot
    run = SFTRun(cfg, info, base, rows, val, eot)
    lock = lock_output(out, info)
    if lock is not None:
        held.callback(lock.release)
    engine, plan = run.engine, run.plan
    keep = cfg.keep_checkpoints
    ckpt = Checkpointer(out / "checkpoints", keep) if store is None else store.checkpointer(keep)
    meta = _meta(cfg, base, plan, eot)
    if store is not None:  # the record names the URLs, not the scratch copies
        meta = {**store.name_origins(meta, "sft_config"), "base": store.url_of(meta["base"])}
    latest = ckpt.latest() if cfg.resume else None
    start = 0
    if latest is not None:
        ckpt.fetch(latest)
        saved = json.loads((latest / TRAINER_STATE).read_text())
        if saved.get("sft_data") != plan.identity():
            raise SFTDataError(f"--resume {latest}: another data plan ({saved.get('sft_data')} vs {plan.identity()})")
        start = int(ckpt.load(latest, engine.model, engine.optimizer, engine.scheduler, {"step": 0})["step"])
        if run.guard is not None and saved.get("spike_guard"):
            run.guard.load_state_dict(saved["spike_guard"])
        log.info("resumed from %s at step %d", latest, start)
    elif run.lora is not None:
        meta["init_from"] = run.lora.start(base.weights, engine.model, base.model_cfg, cfg.seed)
    else:
        meta["init_from"] = init_from(base.weights, engine.model, base.model_cfg)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "run_config.json").write_text(json.dumps(meta, indent=1, default=str))
        log.info("%d rows of %d tokens (%d response targets), %d steps; %d conversations too long, dropped",
                 len(rows), rows.tokens.shape[1] - 1, rows.targets(), plan.steps, rows.dropped_too_long)  # fmt: skip
    metrics = MetricsLogger(out / "metrics.jsonl", info.is_main, start_step=start)
    losses: list[tuple[int, float]] = []
    val_losses: list[tuple[int, float]] = []

    def evaluate(step: int) -> None:
        if val is not None:
            val_losses.append((step, run.evaluate()))
            metrics.log({"step": step, "val_response_loss": val_losses[-1][1]})

    def save(step: int) -> None:
        extra = {"spike_guard": run.guard.state_dict()} if run.guard is not None else {}
        ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, {"step": step}, {**meta, **extra})

    if start == 0 and cfg.eval_every:
        evaluate(0)  # the base model's response loss: the figure SFT is measured against
    stop = min(plan.steps, cfg.max_steps or plan.steps)
    last_saved = start if latest is not None else -1
    clock = time.perf_counter()
    for step in range(start + 1, stop + 1):
        result = run.step(step)
        if result.pop("skipped"):
            metrics.log({"step": step, "spike": True, "loss": result["loss"], "grad_norm": result["grad_norm"]})
        elif step % cfg.log_every == 0 or step in (1, stop):
            losses.append((step, result["loss"]))
            elapsed, clock = time.perf_counter() - clock, time.perf_counter()
            metrics.log({"step": step, **result, "seconds": round(elapsed, 3)})
        if cfg.eval_every and step % cfg.eval_every == 0:
            evaluate(step)
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            save(step)
            last_saved = step
    if val is not None and (not val_losses or val_losses[-1][0] != stop):
        evaluate(stop)
    if last_saved != stop:
        save(stop)
    hf_dir = _export(run, base, encoder, out) if cfg.export_hf else None
    metrics.close()
    if store is not None:
        store.publish_records()
        adapter = out / "adapter" if hf_dir is not None and run.lora is not None else None
        store.publish_export(hf_dir, adapter)
    return SFTResult(stop, losses, val_losses, ckpt.latest(), hf_dir, rows.dropped_too_long)


def _export(run: SFTRun, base: Base, encoder: ChatEncoder, out: Path) -> Path:
    """out/hf (with LoRA: the adapters merged into the weights; plus out/adapter in PEFT's format). Collective."""
    model, cfg, eot = run.engine.model, base.model_cfg, encoder.ids.eot
    if run.lora is None:
        hf_dir = export_live(model, cfg, out / "hf", tokenizer=base.tokenizer, eos_id=eot, bos_id=base.bos_id)
    else:
        hf_dir = out / "hf"
        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if run.info.is_main:
            export_hf(run.lora.merge(weights), cfg, hf_dir, tokenizer=base.tokenizer, eos_id=eot, bos_id=base.bos_id)
            peft_base = base.weights if (base.weights / "config.json").is_file() else None
            run.lora.export_peft(weights, out / "adapter", peft_base)
        torch.distributed.barrier()
    if run.info.is_main:
        write_generation_config(hf_dir, encoder, base.bos_id)
    return hf_dir


OPTIM_FLAGS = {f.name for f in fields(OptimConfig)}
# The pretraining flags' ranges (trainer.train_config), and those only SFT has.
SFT_RANGES = {**FLAG_RANGES, "val_holdout": integer(0, 1 << 40), "epochs": integer(1, 1 << 20),
              "seq_len": integer(2, MAX_SEQ_LEN), "lora_rank": integer(0, SHAPE_LIMITS["dim"]),
              "lora_alpha": real(0, 1e6, open_low=True)}  # fmt: skip


def _flag_type(name: str, kind: type) -> object:
    return SFT_RANGES[name] if kind in (int, float) else flag_type(name, kind)


def parse_args(argv: list[str] | None = None) -> SFTConfig:
    parser = ArgumentParser(
        prog="python -m trainer.sft", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = SFTConfig(Path(), Path(), Path())
    for f in fields(SFTConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "optim":
            for name in sorted(OPTIM_FLAGS - {"betas", "schedule", "optimizer"}):
                value = getattr(defaults.optim, name)
                kind = float if isinstance(value, float) else int
                parser.add_argument("--" + name.replace("_", "-"), type=_flag_type(name, kind), default=value)
            parser.add_argument("--schedule", choices=get_args(ScheduleKind), default=defaults.optim.schedule)
            parser.add_argument("--optimizer", choices=get_args(OptimizerKind), default=defaults.optim.optimizer)
        elif f.name in ("base", "data", "out"):
            parser.add_argument(flag, type=path_or_url, required=True)
        elif isinstance(getattr(defaults, f.name), bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=getattr(defaults, f.name))
        elif f.name in ("tokenizer", "val_data"):
            parser.add_argument(flag, type=path_or_url)
        elif f.name == "scratch":
            help_ = "node-local folder where URL flags are staged (default: temp)"
            parser.add_argument(flag, type=path_or_url, help=help_)
        else:  # int, float or str, as the default is
            default = getattr(defaults, f.name)
            kind = type(default) if default is not None else int
            parser.add_argument(flag, type=_flag_type(f.name, kind), default=default)
    values = vars(parser.parse_args(argv))
    optim = replace(defaults.optim, **{k: values.pop(k) for k in list(values) if k in OPTIM_FLAGS})
    return SFTConfig(**values, optim=optim)


def main(argv: list[str] | None = None) -> None:
    rank0 = os.environ.get("RANK", "0") == "0"
    with contextlib.nullcontext() if rank0 else contextlib.redirect_stderr(io.StringIO()):
        cfg = parse_args(argv)
    try:
        result = sft(cfg)
    except (ValueError, KeyError, OSError) as err:
        if rank0:
            print(f"error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None
    if rank0:
        final = result.losses[-1][1] if result.losses else None
        hf = str(result.hf_dir) if result.hf_dir else None
        summary = {
            "steps_done": result.steps_done,
            "final_loss": final,
            "val_response_loss": result.val_losses,
            "hf": hf,
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
