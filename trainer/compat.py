"""Refuse shards the run cannot train on: another tokenizer, a vocab the model cannot embed, a bad dtype.

A mismatch here would not crash training; it would silently train on garbage ids, so it is an
error before the first step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mixtures.manifest import Manifest, ManifestError
from tokenizer.artifacts import load_tokenizer, resolve_tokenizer_file, tokenizer_sha256


class IncompatibleShards(ValueError):
    """The shards were not written for this tokenizer or this model."""


@dataclass(frozen=True)
class TokenizerIdentity:
    """What the trainer knows about its tokenizer file."""

    path: Path
    sha256: str
    vocab_size: int


def tokenizer_identity(path: str | os.PathLike[str]) -> TokenizerIdentity:
    """Hash and vocab size (added tokens included) of a tokenizer.json or the folder holding it.

    The hash is the tokenizer room's definition (sha256 of the file bytes), the one the shard
    writer records, so the two sides cannot drift apart.
    """
    file = resolve_tokenizer_file(path)
    vocab = load_tokenizer(file).get_vocab_size(with_added_tokens=True)
    return TokenizerIdentity(file, tokenizer_sha256(file), vocab)


def check_compatible(manifest: Manifest, tokenizer: TokenizerIdentity, model_vocab: int) -> None:
    """Raise IncompatibleShards naming the first mismatch between shards, tokenizer and model."""
    where = manifest.root or "shards"
    info = manifest.tokenizer
    if info.sha256 != tokenizer.sha256:
        raise IncompatibleShards(
            f"{where}: written with tokenizer sha256 {info.sha256[:12]}…, "
            f"but {tokenizer.path} has sha256 {tokenizer.sha256[:12]}…"
        )
    if info.vocab_size != tokenizer.vocab_size:
        raise IncompatibleShards(
            f"{where}: manifest vocab_size {info.vocab_size} != tokenizer vocab_size {tokenizer.vocab_size}"
        )
    if model_vocab < info.vocab_size:
        raise IncompatibleShards(f"{where}: model embeds {model_vocab} ids, shards use {info.vocab_size}")
    capacity = 1 << (8 * manifest.token_size)
    if info.vocab_size > capacity:
        raise IncompatibleShards(
            f"{where}: {manifest.token_dtype} holds ids < {capacity}, vocab_size is {info.vocab_size}"
        )
    if not 0 <= info.eos_id < info.vocab_size:
        raise IncompatibleShards(f"{where}: eos_id {info.eos_id} outside the vocab")


def check_same_layout(train: Manifest, other: Manifest) -> None:
    """Validation shards must share the training shards' tokenizer and dtype."""
    if train.tokenizer.sha256 != other.tokenizer.sha256 or train.token_dtype != other.token_dtype:
        raise IncompatibleShards(f"{other.root}: tokenizer or dtype differs from the training shards")


__all__ = [
    "IncompatibleShards",
    "ManifestError",
    "TokenizerIdentity",
    "check_compatible",
    "check_same_layout",
    "tokenizer_identity",
]
