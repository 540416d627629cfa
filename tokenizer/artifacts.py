"""The tokenizer folder on disk: tokenizer.json plus what transformers needs to load it by folder."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from common.atomic import atomic_write_bytes
from common.bounded_input import MAX_DATA_BYTES, read_bounded
from tokenizer.chat import CHAT_TEMPLATE, has_chat_tokens
from tokenizer.model import EOT

TOKENIZER_FILE = "tokenizer.json"


def resolve_tokenizer_file(path: str | os.PathLike[str]) -> Path:
    """Accept a tokenizer.json or a folder holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / TOKENIZER_FILE
    if not p.is_file():
        raise FileNotFoundError(f"no tokenizer file at {p}")
    return p


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a local tokenizer.json (or folder); never reaches the Hub. A FIFO or an oversized file is refused
    (InputRefused, an OSError) and a file that is not a tokenizer is a ValueError naming it: the tokenizers
    library raises a bare Exception ("stream did not contain valid UTF-8"), which no CLI can tell apart."""
    file = resolve_tokenizer_file(path)
    text = read_bounded(file, MAX_DATA_BYTES)
    try:
        return Tokenizer.from_str(text.decode("utf-8"))
    except Exception as err:  # noqa: BLE001 - tokenizers raises plain Exception for any malformed file
        raise ValueError(f"{file}: not a tokenizer.json ({err})") from None


def tokenizer_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of the tokenizer.json bytes: the identity the manifest and the trainer compare."""
    return hashlib.sha256(resolve_tokenizer_file(path).read_bytes()).hexdigest()


def write_tokenizer_dir(tok: Tokenizer, out_dir: Path, training: dict[str, Any]) -> Path:
    """Write tokenizer.json, transformers' config files and a training record, each atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / TOKENIZER_FILE, tok.to_str(pretty=True))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "unk_token": None,
        "pad_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        # byte-level BPE is lossless; transformers' default clean-up would rewrite " ." to "."
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1_000_000_000_000_000_019_884_624_838_656,
    }
    if has_chat_tokens(tok.get_vocab(with_added_tokens=True)):  # apply_chat_template renders as trainer.sft does
        config["chat_template"] = CHAT_TEMPLATE
    _atomic_write(out_dir / "tokenizer_config.json", json.dumps(config, indent=2))
    _atomic_write(out_dir / "special_tokens_map.json", json.dumps({"bos_token": EOT, "eos_token": EOT}))
    record = {**training, "sha256": tokenizer_sha256(out_dir)}
    _atomic_write(out_dir / "training.json", json.dumps(record, indent=2))
    return out_dir / TOKENIZER_FILE


def _atomic_write(path: Path, text: str) -> None:
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))
