"""Requests -> summed log-probabilities with any causal LM forward `tokens (B, T) -> logits (B, T, V)`.

Requests are sorted by length (longest first, so a batch that does not fit fails at once) and cut
into batches of at most `batch_size` sequences and `max_batch_tokens` padded tokens; each batch is
one forward. Sequences are padded on the right: under a causal mask a position never sees the
padding after it, so no attention mask is needed and the scores equal unpadded ones. The
per-token negative log-likelihood is one fused `cross_entropy` in fp32, summed in fp64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from evals.tasks.base import Request, ScoreFn

Forward = Callable[[torch.Tensor], torch.Tensor]


def length_batches(requests: Sequence[Request], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Indices of `requests`, longest first, grouped so each batch is at most batch_size x its longest."""
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i].tokens))
    batches: list[list[int]] = []
    for i in order:
        cur = batches[-1] if batches else None
        width = len(requests[cur[0]].tokens) if cur else 0  # the first of a batch is its longest
        if cur is not None and len(cur) < batch_size and (len(cur) + 1) * width <= max_batch_tokens:
            cur.append(i)
        else:
            batches.append([i])
    return batches


@torch.inference_mode()
def score_batch(forward: Forward, requests: Sequence[Request], device: torch.device | str) -> list[float]:
    """One forward over right-padded requests; each request's summed log-prob of its scored tokens."""
    width = max(len(r.tokens) for r in requests)
    tokens = torch.zeros(len(requests), width, dtype=torch.long)
    scored = torch.zeros(len(requests), width - 1, dtype=torch.bool)
    for row, r in enumerate(requests):
        if not 1 <= r.n_scored <= len(r.tokens) - 1:
            raise ValueError(f"request scores {r.n_scored} of {len(r.tokens)} tokens")
        tokens[row, : len(r.tokens)] = torch.tensor(r.tokens)
        scored[row, len(r.tokens) - 1 - r.n_scored : len(r.tokens) - 1] = True
    tokens = tokens.to(device)
    logits = forward(tokens[:, :-1])
    nll = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    nll = nll.view(len(requests), width - 1).double() * scored.to(device)
    return (-nll.sum(1)).tolist()


def make_scorer(
    forward: Forward,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    max_batch_tokens: int = 16384,
    progress: Callable[[int], None] | None = None,
) -> ScoreFn:
    """A `ScoreFn` over `forward`; `progress(n)` is called after each batch with its number of requests."""

    def score(requests: Sequence[Request]) -> list[float]:
        out = [0.0] * len(requests)
        for batch in length_batches(requests, batch_size, max_batch_tokens):
            for i, value in zip(batch, score_batch(forward, [requests[i] for i in batch], device), strict=True):
                out[i] = value
            if progress is not None:
                progress(len(batch))
        return out

    return score
