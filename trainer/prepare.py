"""Before step 1: open and check the shards, size the model's vocab, cut the epoch and the held-out set.

Everything here can refuse the run (foreign tokenizer, vocab too small, too few files to hold out),
so it runs before the model is built; the loop then only consumes what `prepare_data` returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from mixtures.manifest import ManifestError, read_manifest
from mixtures.reader import ShardReader
from trainer.batch import BatchError, BatchShape, resolve_batch
from trainer.compat import check_compatible, check_same_layout, tokenizer_identity
from trainer.config import ModelConfig
from trainer.data import EpochLoader, EpochPlan, WindowIndex, validation_batches
from trainer.distributed import DistInfo, rank0_verdict
from trainer.model_spec import model_config
from trainer.shard_store import StoreShardReader, store_source
from trainer.train_config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class PreparedData:
    """The shards resolved against the tokenizer and model: what the loop consumes."""

    model_cfg: ModelConfig
    tokenizer_file: Path
    tokenizer_sha256: str
    eos_id: int
    bos_id: int | None
    plan: EpochPlan
    loader: EpochLoader
    val: list[torch.Tensor]


def open_shards(path: Path, verify: bool) -> ShardReader:
    """Rank 0 checksums the shards once; every rank then maps them without re-hashing. A mixture on a store
    (staged by `trainer.store`: its manifest only) is read by range reads (`trainer.shard_store`)."""
    source = store_source(path)
    if source is not None:
        reader = StoreShardReader(path, source)
        rank0_verdict(lambda: reader.check(verify), (ManifestError, OSError))
        return reader
    if verify:
        rank0_verdict(lambda: read_manifest(path, verify=True), ManifestError)
    return ShardReader(path, verify=False)


def batch_shape(cfg: TrainConfig, seq_len: int, world_size: int) -> BatchShape:
    """The run's micro-batch and accumulation: as given, or derived from `--global-batch-tokens`."""
    if cfg.global_batch_tokens is None:
        return BatchShape(cfg.micro_batch, cfg.grad_accum)
    if cfg.grad_accum != 1:
        raise BatchError("--global-batch-tokens derives --grad-accum; do not give both")
    shape = resolve_batch(cfg.global_batch_tokens, seq_len, world_size, cfg.micro_batch)
    log.info("--global-batch-tokens %d: %s", cfg.global_batch_tokens, shape.describe(seq_len, world_size))
    return shape


def prepare_data(cfg: TrainConfig, info: DistInfo) -> PreparedData:
    """Open and check the shards, size the model's vocab, cut the epoch and the held-out set."""
    reader = open_shards(Path(cfg.shards), cfg.verify_shards)
    manifest = reader.manifest
    seq_len = cfg.seq_len or manifest.seq_len
    if seq_len != manifest.seq_len:
        log.warning("training at seq_len %d, shards were prepared for %d", seq_len, manifest.seq_len)
    tok = tokenizer_identity(cfg.tokenizer)
    model_cfg = model_config(cfg, tok.vocab_size, seq_len)
    check_compatible(manifest, tok, model_cfg.vocab_size)

    n_files = len(reader)
    if cfg.val_holdout_files >= n_files:
        raise ValueError(f"cannot hold out {cfg.val_holdout_files} of {n_files} shard files")
    n_train = n_files - cfg.val_holdout_files
    index = WindowIndex(reader, seq_len, list(range(n_train)))
    val_index = None
    if cfg.val_shards is not None:
        val_reader = open_shards(Path(cfg.val_shards), cfg.verify_shards)
        check_same_layout(manifest, val_reader.manifest)
        val_index = WindowIndex(val_reader, seq_len)
    elif cfg.val_holdout_files:
        val_index = WindowIndex(reader, seq_len, list(range(n_train, n_files)))
    shape = batch_shape(cfg, seq_len, info.dp_size)  # batch in tokens: split over data-parallel ranks
    val = []
    if val_index is not None:
        val = validation_batches(val_index, shape.micro_batch, cfg.val_batches, info.dp_rank, info.dp_size)
    # data-parallel coordinates: ranks that differ only in tp / pp / cp read the same windows
    plan = EpochPlan(index.num_windows, shape.micro_batch, shape.grad_accum, info.dp_size, seq_len)
    loader = EpochLoader(index, plan, info.dp_rank, cfg.seed)
    tok_info = manifest.tokenizer
    return PreparedData(model_cfg, tok.path, tok.sha256, tok_info.eos_id, tok_info.bos_id, plan, loader, val)
