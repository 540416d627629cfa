"""Requests -> summed log-probabilities with any causal LM split as `body` and `head`.

`body(tokens (B, T)) -> hidden (B, T, D)` and `head(hidden (N, D)) -> logits (N, V)`; with no head,
`body` returns the logits itself. Requests are sorted by length (longest first, so a batch that
does not fit fails at once) and cut into batches of at most `batch_size` sequences and
`max_batch_tokens` padded tokens; each batch is one forward. Sequences are padded on the right:
under a causal mask a position never sees the padding after it, so no attention mask is needed
and the scores equal unpadded ones. The head runs only at the scored positions (not at padding,
prefixes or a window's context), in chunks; each token's negative log-likelihood is one fused
`cross_entropy` in fp32 (on CPU much faster than an unfused logsumexp), summed per sequence in fp64;
beside it, whether every scored token was the argmax (`Score.greedy`, for exact-match tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from evals.tasks.base import Request, Score, ScoreFn

Forward = Callable[[torch.Tensor], torch.Tensor]
HEAD_CHUNK = 4096  # scored positions per head matmul: bounds the (chunk, vocab) logits in memory


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
def score_batch(
    body: Forward, head: Forward | None, requests: Sequence[Request], device: torch.device | str
) -> list[float]:
    """One forward over right-padded requests; each request's summed log-prob of its scored tokens."""
    width = max(len(r.tokens) for r in requests)
    tokens = torch.zeros(len(requests), width, dtype=torch.long)
    scored = torch.zeros(len(requests), width - 1, dtype=torch.bool)
    for row, r in enumerate(requests):
        if not 1 <= r.n_scored <= len(r.tokens) - 1:
            raise ValueError(f"request scores {r.n_scored} of {len(r.tokens)} tokens")
        tokens[row, : len(r.tokens)] = torch.tensor(r.tokens)
        scored[row, len(r.tokens) - 1 - r.n_scored : len(r.tokens) - 1] = True
    tokens, scored = tokens.to(device), scored.to(device)
    hidden = body(tokens[:, :-1])[scored]  # (N, D), or (N, V) without a head
    targets = tokens[:, 1:][scored]
    rows = torch.arange(len(requests), device=device)[:, None].expand_as(scored)[scored]
    nll = torch.empty(len(targets), dtype=torch.float64, device=device)
    missed = torch.empty(len(targets), dtype=torch.int32, device=device)  # scored token is not the argmax
    for a in range(0, len(targets), HEAD_CHUNK):
        logits = (head(hidden[a : a + HEAD_CHUNK]) if head is not None else hidden[a : a + HEAD_CHUNK]).float()
        nll[a : a + HEAD_CHUNK] = F.cross_entropy(logits, targets[a : a + HEAD_CHUNK], reduction="none").double()
        missed[a : a + HEAD_CHUNK] = logits.argmax(-1) != targets[a : a + HEAD_CHUNK]
    sums = torch.zeros(len(requests), dtype=torch.float64, device=device).index_add_(0, rows, nll)
    misses = torch.zeros(len(requests), dtype=torch.int32, device=device).index_add_(0, rows, missed)
    return [Score(-s, m == 0) for s, m in zip(sums.tolist(), misses.tolist(), strict=True)]


def make_scorer(
    body: Forward,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    max_batch_tokens: int = 16384,
    progress: Callable[[int], None] | None = None,
    head: Forward | None = None,
) -> ScoreFn:
    """A `ScoreFn` over the model; `progress(n)` is called after each batch with its number of requests."""

    def score(requests: Sequence[Request]) -> list[float]:
        out = [0.0] * len(requests)
        for batch in length_batches(requests, batch_size, max_batch_tokens):
            values = score_batch(body, head, [requests[i] for i in batch], device)
            for i, value in zip(batch, values, strict=True):
                out[i] = value
            if progress is not None:
                progress(len(batch))
        return out

    return score
