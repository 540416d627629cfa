"""Turn document texts into token ids: HF `tokenizers`, or tiktoken's BPE engine where it is equivalent.

For a byte-level BPE with no normalizer, a regex split and only special added tokens (what
`tokenizer.train` writes), tiktoken's Rust core computes the same ids about twice as fast as
`encode_batch_fast`. It is used only when installed and the tokenizer.json has exactly that shape, and
each process first checks it against HF on a sample of real documents (up to 256, capped to 4,000
characters each) and falls back on any difference. Literal special-token text is plain text to both.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from tokenizers import Tokenizer

from mixtures.pool import available_cores

log = logging.getLogger(__name__)

Encode = Callable[[list[str]], list[list[int]]]
VERIFY_DOCS = 256
VERIFY_CHARS = 4000
_CHOSEN: dict[tuple[str, int, int, bool], Encode] = {}
_LOCK = threading.Lock()
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _version(path: str) -> tuple[str, int, int]:
    """Cache key: a tokenizer.json rewritten in place (a retrain) is a new tokenizer."""
    st = os.stat(path)
    return path, st.st_mtime_ns, st.st_size


def hf_tokenizer(path: str) -> Tokenizer:
    return _hf_tokenizer(_version(path))


@lru_cache(maxsize=4)
def _hf_tokenizer(version: tuple[str, int, int]) -> Tokenizer:
    tok = Tokenizer.from_file(version[0])
    # a document that quotes "<|endoftext|>" must not split itself in two: encode it as plain text
    tok.encode_special_tokens = True
    return tok


def hf_encode(path: str) -> Encode:
    tok = hf_tokenizer(path)
    return lambda texts: [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


def fast_encode(path: str) -> Encode | None:
    """tiktoken over the same vocabulary, or None when not installed or not provably the same."""
    return _fast_encode(_version(path))


@lru_cache(maxsize=4)
def _fast_encode(version: tuple[str, int, int]) -> Encode | None:
    path = version[0]
    try:
        import tiktoken
    except ImportError:
        return None
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    pattern = _split_pattern(spec)
    if pattern is None:
        return None
    # added tokens; the chat tokens live outside the BPE's vocabulary, `<|endoftext|>` inside it
    special = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    byte_of = _unicode_to_byte()
    try:
        ranks = {
            bytes(byte_of[c] for c in token): i
            for token, i in spec["model"]["vocab"].items()
            if token not in special
        }
    except KeyError:  # a token outside the byte-level alphabet
        return None
    if (
        len(ranks) + len(special.keys() & spec["model"]["vocab"].keys()) != len(spec["model"]["vocab"])
        or len({b for b in ranks if len(b) == 1}) != 256
    ):
        return None
    encoding = tiktoken.Encoding("cc2model", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})

    def encode(texts: list[str]) -> list[list[int]]:
        return encoding.encode_ordinary_batch(texts, num_threads=_threads())

    encode.engine = "tiktoken"  # type: ignore[attr-defined]
    return encode


def engine_of(encode: Encode) -> str:
    """"tiktoken" for the fast encoder (it runs its own threads), else "tokenizers"."""
    return getattr(encode, "engine", "tokenizers")


def choose_encoder(path: str, sample: list[str], allow_fast: bool = True) -> Encode:
    """The fast encoder if it reproduces HF's ids on `sample`, else HF; decided once per process."""
    key = (*_version(path), allow_fast)
    with _LOCK:
        if key not in _CHOSEN:
            _CHOSEN[key] = _verified(path, [t[:VERIFY_CHARS] for t in sample[:VERIFY_DOCS]], allow_fast)
        return _CHOSEN[key]


def _verified(path: str, sample: list[str], allow_fast: bool) -> Encode:
    fast = fast_encode(path) if allow_fast else None
    if fast is None:
        return hf_encode(path)
    if fast(sample) != hf_encode(path)(sample):
        log.warning("tiktoken and tokenizers disagree on %s; using tokenizers", path)
        return hf_encode(path)
    return fast


def _threads() -> int:
    """Threads per call: the worker's share of the cores in a process pool (pool.py), else all of them."""
    return int(os.environ.get("RAYON_NUM_THREADS", 0)) or available_cores()


def _split_pattern(spec: dict[str, Any]) -> str | None:
    """The regex tiktoken must apply, if the tokenizer is a plain byte-level BPE; else None."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or spec.get("normalizer") is not None:
        return None
    if any(
        model.get(k) for k in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback")
    ):
        return None
    if model.get("ignore_merges") or any(not t.get("special") for t in spec.get("added_tokens", [])):
        return None
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
        return GPT2_SPLIT
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    if len(steps) != 2:
        return None
    split, byte_level = steps
    regex = (split.get("pattern") or {}).get("Regex")
    if (
        split.get("type") != "Split"
        or regex is None
        or split.get("behavior") != "Isolated"
        or split.get("invert")
        or byte_level.get("type") != "ByteLevel"
        or byte_level.get("use_regex", True)
        or byte_level.get("add_prefix_space")
    ):
        return None
    return regex


def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable character table used by the ByteLevel pre-tokenizer."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table
