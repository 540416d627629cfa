"""Bits per byte: total negative log-likelihood in bits over the documents' UTF-8 bytes.

Each document is scored as the trainer saw documents: after the prefix token (`<|endoftext|>`,
which ends the previous document), every token predicted exactly once. A document longer than
the context is cut into sliding windows: the first window scores its first `context` tokens; each
next window moves `stride` tokens, scores only those `stride` new tokens and gives them the
`context - stride` tokens before them as context (Hugging Face's perplexity recipe). `stride ==
context` gives disjoint windows (lm-eval's `loglikelihood_rolling`); the default `context // 2`
keeps at least half a context behind every scored token. Bytes do not depend on the tokenizer, so
models with different tokenizers compare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.tasks.base import Encoder, Request, Task, TaskDataError, ratio
from evals.tasks.texts import read_documents


def rolling_windows(tokens: Sequence[int], context: int, stride: int) -> list[Request]:
    """Windows over `tokens` (prefix first) that score tokens[1:] exactly once, each input <= context."""
    if not 1 <= stride <= context:
        raise ValueError(f"stride {stride} must be in 1..context ({context})")
    out = []
    end = min(len(tokens), context + 1)
    if end > 1:
        out.append(Request(tuple(tokens[:end]), end - 1))
    while end < len(tokens):
        new_end = min(len(tokens), end + stride)
        start = max(0, new_end - 1 - context)
        out.append(Request(tuple(tokens[start:new_end]), new_end - end))
        end = new_end
    return out


class BitsPerByte(Task):
    name = "bpb"

    def __init__(self, documents: Sequence[str], context: int | None = None, stride: int | None = None) -> None:
        if not documents:
            raise TaskDataError("bpb: no documents")
        self.documents = list(documents)
        self.context, self.stride = context, stride
        self._tokens: dict[int, int] = {}  # item -> token count, filled by requests()

    @classmethod
    def from_path(cls, path: str | Path, **kw: Any) -> BitsPerByte:
        return cls(read_documents(path), **kw)

    def __len__(self) -> int:
        return len(self.documents)

    def window(self, encoder: Encoder) -> tuple[int, int]:
        context = min(self.context or encoder.context_len, encoder.context_len)
        return context, self.stride or max(1, context // 2)

    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        context, stride = self.window(encoder)
        ids = encoder.encode([self.documents[i] for i in items])
        self._tokens.update((i, len(t)) for i, t in zip(items, ids, strict=True))
        return [rolling_windows([encoder.prefix_id, *t], context, stride) for t in ids]

    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        return {
            "nats": -math.fsum(scores),
            "bytes": len(self.documents[item].encode("utf-8")),
            "tokens": self._tokens[item],
            "documents": 1,
        }

    def keys(self) -> list[str]:
        return ["nats", "bytes", "tokens", "documents"]

    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        bits = totals.get("nats", 0.0) / math.log(2)
        return {
            "bits_per_byte": ratio(bits, totals.get("bytes", 0)),
            "bytes": int(totals.get("bytes", 0)),
            "tokens": int(totals.get("tokens", 0)),
        }
