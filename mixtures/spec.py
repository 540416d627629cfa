"""The mixture spec (YAML): which sources, in what proportions, up to what token budget.

    tokenizer: out/tokenizer            # tokenizer.json or its folder
    target_tokens: 2_000_000_000
    seq_len: 2048
    seed: 0
    separator: append                   # append | prepend | both | none (see tokenizer/README.md)
    tokens_per_file: 268435456          # output shard size (the trainer reads files in parallel)
    workers: 1                          # 1: this process, all cores; N > 1: N processes (pool.py)
    encoder: auto                       # auto: tiktoken when installed and equivalent (encoders.py); hf
    sources:
      - name: cc-2024-10
        path: out/CC-MAIN-2024-10       # run dir, parquet folder or glob, or token shards (.ds)
        weight: 0.8
        max_repetition: 1
        rehydrate: {1: 1, 2: 3, 3: 4, 5: 6, 100: 1}   # optional, FineWeb-2 style
      - name: wiki
        path: "data/wiki/*.parquet"
        weight: 0.2
        max_repetition: 4

`target_tokens: epoch` asks for one epoch of what the sources hold: every document of every source
exactly once, counted while the build tokenizes them. Weights then describe nothing a reader could set
(each source gives all its tokens), so a source under `epoch` takes no weight other than 1, no
`max_repetition` other than 1 and no `rehydrate`; the manifest records as each source's weight its
share of the epoch's tokens (its realized ratio).

Relative paths are resolved against the spec file's folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from common import strict_yaml
from common.cli import MAX_NODE_CPUS, SEED, Bounded, integer, real

SEPARATORS = ("append", "prepend", "both", "none")
ENCODERS = ("auto", "hf")
EPOCH = "epoch"  # `target_tokens: epoch`: every document of every source once


# A document longer than this is skipped before tokenization (counted per source in the manifest): BPE on
# one long run without a space is super-linear, and a curated document this long (FineWeb's rules drop
# pages over 100,000 words, about 600,000 characters) is a page the rules did not see, not text to learn.
DEFAULT_MAX_DOC_CHARS = 1_000_000


class SpecError(ValueError):
    """The spec is malformed (as opposed to well-formed but not satisfiable by the data)."""


@dataclass(frozen=True)
class SourceSpec:
    """One source: documents (curated parquet) or already tokenized shards, and its share."""

    name: str
    paths: tuple[str, ...]
    weight: float
    max_repetition: float = 1.0
    rehydrate: dict[int, int] | None = None
    column: str = "text"
    cluster_column: str = "minhash_cluster_size"
    top_fraction: float | None = None  # keep only the best documents by `score_column` (top_slice.py)
    score_column: str = "quality_score"


@dataclass(frozen=True)
class MixtureSpec:
    """A whole mixture; weights are normalised to sum to 1. `target_tokens` is a count or ``EPOCH``."""

    sources: tuple[SourceSpec, ...]
    target_tokens: int | Literal["epoch"]
    seq_len: int
    tokenizer: str
    seed: int = 0
    separator: str = "append"
    tokens_per_file: int = 1 << 28
    workers: int = 1
    encoder: str = "auto"
    max_doc_chars: int = DEFAULT_MAX_DOC_CHARS
    base_dir: Path = field(default_factory=Path.cwd)

    @property
    def is_epoch(self) -> bool:
        """One epoch of the sources: the token target is whatever they hold, known once they are tokenized."""
        return self.target_tokens == EPOCH

    def resolve(self, path: str) -> str:
        """A spec path made absolute against the spec's folder (globs kept as globs)."""
        return path if os.path.isabs(path) else str(self.base_dir / path)


def load_spec(path: str | os.PathLike[str]) -> MixtureSpec:
    """Parse a YAML spec file."""
    p = Path(path)
    data = strict_yaml.load_file(p)  # OSError, UnicodeDecodeError, yaml.YAMLError: the CLI's one line
    return spec_from_dict(data, base_dir=p.resolve().parent)


def spec_from_dict(data: dict[str, Any], base_dir: str | os.PathLike[str] | None = None) -> MixtureSpec:
    """Validate a spec dict; raise SpecError naming the offending key."""
    if not isinstance(data, dict):
        raise SpecError("spec must be a mapping")
    unknown = set(data) - {
        "sources",
        "target_tokens",
        "seq_len",
        "seed",
        "tokenizer",
        "separator",
        "tokens_per_file",
        "workers",
        "encoder",
        "max_doc_chars",
    }
    if unknown:
        raise SpecError(f"unknown spec keys: {sorted(unknown)}")
    for key in ("sources", "target_tokens", "seq_len", "tokenizer"):
        if key not in data:
            raise SpecError(f"spec is missing `{key}`")
    raw_sources = data["sources"]
    if not isinstance(raw_sources, list) or not raw_sources:
        raise SpecError("`sources` must be a non-empty list")
    epoch = data["target_tokens"] == EPOCH
    sources = [_source(s, i, epoch) for i, s in enumerate(raw_sources)]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise SpecError(f"source names must be unique: {names}")
    total_weight = sum(s.weight for s in sources)
    if total_weight <= 0:
        raise SpecError("source weights must sum to more than 0")
    sources = [replace(s, weight=s.weight / total_weight) for s in sources]
    separator = str(data.get("separator", "append"))
    if separator not in SEPARATORS:
        raise SpecError(f"`separator` must be one of {SEPARATORS}, got {separator!r}")
    workers = data.get("workers")
    encoder = str(data.get("encoder", "auto"))
    if encoder not in ENCODERS:
        raise SpecError(f"`encoder` must be one of {ENCODERS}, got {encoder!r}")
    return MixtureSpec(
        sources=tuple(sources),
        target_tokens=EPOCH if epoch else _target_tokens(data["target_tokens"]),
        seq_len=_seq_len(data["seq_len"]),
        tokenizer=str(data["tokenizer"]),
        seed=_bounded(SEED, data.get("seed", 0), "seed"),
        separator=separator,
        tokens_per_file=_bounded(integer(1, 1 << 40), data.get("tokens_per_file", 1 << 28), "tokens_per_file"),
        workers=1 if workers is None else _bounded(integer(1, MAX_NODE_CPUS), workers, "workers"),
        encoder=encoder,
        max_doc_chars=_bounded(integer(1, 1 << 40), data.get("max_doc_chars", DEFAULT_MAX_DOC_CHARS), "max_doc_chars"),
        base_dir=Path(base_dir) if base_dir is not None else Path.cwd(),
    )


MAX_SEQ_LEN = 1 << 24  # 16M tokens a window: beyond any model's context, and a window is held in memory whole
MAX_TARGET_TOKENS = 1 << 50  # a quadrillion tokens: ~30 times the largest training runs
MAX_REPEATS = 10_000  # copies of one document: repetition stops helping after a few dozen epochs


def _seq_len(value: Any) -> int:
    """A window length a model can train on (`seq_len: 1e12` was accepted, then sized buffers by it)."""
    seq_len = _positive_int(value, "seq_len")
    if seq_len > MAX_SEQ_LEN:
        raise SpecError(f"`seq_len` must be at most {MAX_SEQ_LEN:,} tokens, got {seq_len:,}")
    return seq_len


def _bounded(bounded: Bounded, value: Any, key: str, where: str = "") -> Any:
    """`value` in the range a real build could use (`workers: 1e9` started that many processes, a weight of
    1e308 summed to inf and every weight became 0): one SpecError line naming the key otherwise."""
    try:
        return bounded.check(value, f"{where}`{key}`")
    except ValueError as err:
        raise SpecError(str(err)) from None


def _source(raw: Any, idx: int, epoch: bool = False) -> SourceSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"sources[{idx}] must be a mapping")
    name = str(raw.get("name", "?"))
    if not name.isprintable():  # it is printed in the build's summary: no escape codes reach the terminal
        raise SpecError(f"sources[{idx}]: name {ascii(name)[:200]} holds control characters")
    where = f"sources[{idx}] ({name})"
    known = {"name", "path", "weight", "max_repetition", "rehydrate", "column", "cluster_column"}
    unknown = set(raw) - known - {"top_fraction", "score_column"}
    if unknown:
        raise SpecError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("name", "path") if epoch else ("name", "path", "weight"):
        if key not in raw:
            raise SpecError(f"{where}: missing `{key}`")
    paths = raw["path"] if isinstance(raw["path"], list) else [raw["path"]]
    weight = float(_bounded(real(0, 1e12), _number(raw.get("weight", 1.0), "weight", where), "weight", f"{where}: "))
    max_rep = _number(raw.get("max_repetition", 1.0), "max_repetition", where)  # a document's copies at most
    max_rep = float(_bounded(real(0, MAX_REPEATS, open_low=True), max_rep, "max_repetition", f"{where}: "))
    rehydrate = _rehydrate(raw.get("rehydrate"), where)
    if epoch:
        _check_epoch_source(weight, max_rep, rehydrate, where)
    top = raw.get("top_fraction")
    if top is not None and not (isinstance(top, int | float) and 0 < top <= 1):
        raise SpecError(f"{where}: top_fraction must be in (0, 1], got {top!r}")
    return SourceSpec(
        name=str(raw["name"]),
        paths=tuple(str(p) for p in paths),
        weight=weight,
        max_repetition=max_rep,
        rehydrate=rehydrate,
        column=str(raw.get("column", "text")),
        cluster_column=str(raw.get("cluster_column", "minhash_cluster_size")),
        top_fraction=None if top is None else float(top),
        score_column=str(raw.get("score_column", "quality_score")),
    )


def _check_epoch_source(weight: float, max_rep: float, rehydrate: dict[int, int] | None, where: str) -> None:
    """Under `target_tokens: epoch` a source gives each of its documents once: nothing may ask otherwise."""
    if weight != 1:
        asked = f"weight {weight:g}"
    elif max_rep != 1:
        asked = f"max_repetition {max_rep:g}"
    elif rehydrate is not None:
        asked = "rehydrate"
    else:
        return
    raise SpecError(
        f"{where}: {asked} has no meaning under `target_tokens: {EPOCH}` (every document once); "
        "omit it, or give a token count to mix by weight"
    )


def _number(value: Any, key: str, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{where}: {key} must be a number, got {value!r}") from err


def _rehydrate(raw: Any, where: str) -> dict[int, int] | None:
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"{where}: rehydrate must map cluster sizes to repetition counts")
    try:
        if any(isinstance(x, float) and not x.is_integer() for item in raw.items() for x in item):
            raise ValueError("a fraction")  # 1.5 copies were silently 1
        table = {int(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: .inf
        raise SpecError(f"{where}: rehydrate keys and values must be integers") from err
    if min(table) < 1 or min(table.values()) < 0 or max(table.values()) > MAX_REPEATS:
        raise SpecError(f"{where}: rehydrate cluster sizes must be >= 1 and counts in [0, {MAX_REPEATS}]")
    return table


def _target_tokens(value: Any) -> int:
    try:
        number = _positive_int(value, "target_tokens")
    except SpecError:
        raise SpecError(f"`target_tokens` must be a positive integer or `{EPOCH}`, got {value!r}") from None
    return _bounded(integer(1, MAX_TARGET_TOKENS), number, "target_tokens")


def _positive_int(value: Any, key: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: .inf
        raise SpecError(f"`{key}` must be an integer, got {value!r}") from err
    if number <= 0 or number != float(value):
        raise SpecError(f"`{key}` must be a positive integer, got {value!r}")
    return number
