"""What every task shares: the request a model scores, the encoder a task tokenizes with, and the loop.

A task is data plus a scoring rule (lm-evaluation-harness's idea). It turns its items into
`Request`s, a `ScoreFn` returns each request's summed log-probability, and the task folds the scores
into *additive* totals (counts, sums of nats). Totals add across shards, so a sharded model scores
its share of the items on each rank and all-reduces `totals_vector(...)`; `metrics(totals)` then
gives the same figures as a single process. Tasks never see the model, only `score`.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tokenizers import Tokenizer

EOT = "<|endoftext|>"
T = TypeVar("T")
EVAL_CHUNK = 4096  # items whose requests are built and scored together by `evaluate`


class TaskDataError(ValueError):
    """A task's input is unusable (missing, empty, wrong fields): reported as a one-line error."""


@dataclass(frozen=True)
class Request:
    """Score the last `n_scored` tokens of `tokens`, each given all tokens before it (causal LM)."""

    tokens: tuple[int, ...]
    n_scored: int


class Score(float):
    """A request's summed log-probability that also says whether every scored token was the model's argmax
    (lm-eval's ``is_greedy``): what an exact-match task (LAMBADA-style) needs beside the likelihood."""

    greedy: bool

    def __new__(cls, value: float, greedy: bool) -> Score:
        obj = super().__new__(cls, value)
        obj.greedy = greedy
        return obj


ScoreFn = Callable[[Sequence[Request]], list[float]]
"""Requests -> their summed log-probabilities (natural log), in the order given; the model scorers return
`Score`s (floats that also carry `greedy`)."""


@dataclass(frozen=True)
class Encoder:
    """What a task needs to know of the model: its tokenizer, the token that opens a document
    (lm-eval's prefix token: BOS, else EOS) and its context length in tokens."""

    tokenizer: Tokenizer
    prefix_id: int
    context_len: int

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens (one Rust call for the whole list)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def prefix_token(tokenizer: Tokenizer, folder: Path, bos_id: int | None, eos_id: int | None) -> int:
    """The token before a scored text, by lm-eval's rule: the tokenizer's BOS, else its EOS.

    BOS/EOS come from tokenizer_config.json when the tokenizer room wrote one, else from the model
    config's ids, else `<|endoftext|>`.
    """
    side = folder / "tokenizer_config.json"
    named = json.loads(side.read_text()) if side.is_file() else {}
    for key, fallback in (("bos_token", bos_id), ("eos_token", eos_id)):
        token = named.get(key)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            return tokenizer.token_to_id(token)
        if fallback is not None:
            return int(fallback)
    if tokenizer.token_to_id(EOT) is not None:
        return tokenizer.token_to_id(EOT)
    raise TaskDataError(f"{folder}: no BOS or EOS token to start a text with")


def continuation_requests(encoder: Encoder, pairs: Sequence[tuple[str, str]]) -> list[Request]:
    """(context, continuation) -> the request lm-evaluation-harness builds for `loglikelihood`.

    Empty context: the prefix token is the context (unless the continuation already starts with it).
    Otherwise trailing spaces of the context move to the continuation, the whole string is encoded
    and the continuation is what follows the context's own tokens (lm-eval's `_encode_pair`).
    The sequence is cut from the left to `context_len + 1` tokens, as lm-eval does.
    """
    moved = []
    for context, continuation in pairs:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        moved.append((context, continuation))
    conts = encoder.encode([c for ctx, c in moved if not ctx])
    wholes = encoder.encode([ctx + c for ctx, c in moved if ctx])
    ctxs = encoder.encode([ctx for ctx, _ in moved if ctx])
    it_cont, it_whole, it_ctx = iter(conts), iter(wholes), iter(ctxs)
    out = []
    for context, _ in moved:
        if not context:
            ids = next(it_cont)
            tokens, n = (
                (ids, len(ids) - 1) if ids and ids[0] == encoder.prefix_id else ([encoder.prefix_id] + ids, len(ids))
            )
        else:
            whole, ctx_ids = next(it_whole), next(it_ctx)
            tokens, n = whole, len(whole) - len(ctx_ids)
        if n < 1:
            raise TaskDataError(f"continuation of {context[:40]!r} has no tokens")
        tokens = tokens[-(encoder.context_len + 1) :]
        out.append(Request(tuple(tokens), min(n, len(tokens) - 1)))
    return out


class Task(ABC):
    """Items, their requests, an additive tally per item and the metrics of the totals."""

    name: str
    limit_takes_prefix = False  # True where the item order is already mixed (a suite's interleaved rows)

    @abstractmethod
    def __len__(self) -> int:
        """Number of items (documents, pairs, questions)."""

    @abstractmethod
    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        """The requests of each item, in the order of `items`."""

    @abstractmethod
    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        """Additive statistics of one item from its requests' scores."""

    @abstractmethod
    def keys(self) -> list[str]:
        """Every key `tally` can produce over all items, in a fixed order (for all-reduce)."""

    @abstractmethod
    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        """The reported figures from summed tallies."""


def spread(items: Sequence[T], n: int) -> list[T]:
    """`n` items spread evenly over `items` (the first, then every len/n-th): a subset that keeps the
    file's variety (BLiMP's 67 paradigms in proportion), unlike its first `n` items."""
    n = min(n, len(items))
    return [items[i * len(items) // n] for i in range(n)]


def shard_items(
    n_items: int, rank: int = 0, world_size: int = 1, limit: int | None = None, prefix: bool = False
) -> list[int]:
    """This rank's items among `limit` spread evenly over the task (`spread`: a BLiMP subset covers every
    paradigm, not the first one), or its first `limit` items with `prefix` (a task whose order is already
    mixed: `Task.limit_takes_prefix`): every world_size-th, so shares differ by at most one."""
    if limit is None:
        chosen: Sequence[int] = range(n_items)
    else:
        chosen = range(min(limit, n_items)) if prefix else spread(range(n_items), limit)
    return list(chosen[rank::world_size])


def task_totals(task: Task, encoder: Encoder, score: ScoreFn, items: Iterable[int]) -> dict[str, float]:
    """Score every request of `items` in one call (the scorer batches them) and sum the tallies."""
    items = list(items)
    per_item = task.requests(encoder, items)
    scores = score([r for reqs in per_item for r in reqs])
    totals: dict[str, float] = defaultdict(float)
    at = 0
    for item, reqs in zip(items, per_item, strict=True):
        for key, value in task.tally(item, scores[at : at + len(reqs)]).items():
            totals[key] += value
        at += len(reqs)
    return dict(totals)


def totals_vector(task: Task, totals: Mapping[str, float]) -> list[float]:
    """Totals in `task.keys()` order: the tensor a sharded evaluation all-reduces."""
    return [float(totals.get(k, 0.0)) for k in task.keys()]


def totals_from_vector(task: Task, vector: Sequence[float]) -> dict[str, float]:
    return dict(zip(task.keys(), (float(v) for v in vector), strict=True))


def evaluate(task: Task, encoder: Encoder, score: ScoreFn, limit: int | None = None) -> dict[str, Any]:
    """Single-process evaluation of `limit` items spread over the task (all by default), `EVAL_CHUNK` items at a time so
    the requests of a large suite (CORE: ~150,000 few-shot prompts) are never all in memory at once."""
    items = shard_items(len(task), limit=limit, prefix=task.limit_takes_prefix)
    if not items:
        raise TaskDataError(f"task {task.name} has no items")
    totals: dict[str, float] = defaultdict(float)
    for start in range(0, len(items), EVAL_CHUNK):
        for key, value in task_totals(task, encoder, score, items[start : start + EVAL_CHUNK]).items():
            totals[key] += value
    return task.metrics(totals)


def ratio(num: float, den: float) -> float:
    return num / den if den else math.nan
