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

With a `prefix_body` (our Transformer's, `evals.models.prefix_forward`), the choices of a question, which
share a long few-shot context, encode that context once: consecutive requests with a common token
prefix form a group, the prefixes of a batch of groups run once and keep their keys and values, and
each continuation runs against them (CORE's 10-shot prompts: most of every sequence is the shared
context). The scores equal the plain path's within float tolerance (tests/evals/test_prefix_cache.py).
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


def scored_sums(
    hidden: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor, n_rows: int, head: Forward | None
) -> list[Score]:
    """Hidden states (or logits) at the scored positions, their target tokens and request rows -> each
    request's summed log-probability and whether every scored token was the argmax."""
    device = targets.device
    nll = torch.empty(len(targets), dtype=torch.float64, device=device)
    missed = torch.empty(len(targets), dtype=torch.int32, device=device)  # scored token is not the argmax
    for a in range(0, len(targets), HEAD_CHUNK):
        logits = (head(hidden[a : a + HEAD_CHUNK]) if head is not None else hidden[a : a + HEAD_CHUNK]).float()
        nll[a : a + HEAD_CHUNK] = F.cross_entropy(logits, targets[a : a + HEAD_CHUNK], reduction="none").double()
        missed[a : a + HEAD_CHUNK] = logits.argmax(-1) != targets[a : a + HEAD_CHUNK]
    sums = torch.zeros(n_rows, dtype=torch.float64, device=device).index_add_(0, rows, nll)
    misses = torch.zeros(n_rows, dtype=torch.int32, device=device).index_add_(0, rows, missed)
    return [Score(-s, m == 0) for s, m in zip(sums.tolist(), misses.tolist(), strict=True)]


def check_request(r: Request) -> None:
    if not 1 <= r.n_scored <= len(r.tokens) - 1:
        raise ValueError(f"request scores {r.n_scored} of {len(r.tokens)} tokens")


@torch.inference_mode()
def score_batch(
    body: Forward, head: Forward | None, requests: Sequence[Request], device: torch.device | str
) -> list[float]:
    """One forward over right-padded requests; each request's summed log-prob of its scored tokens."""
    width = max(len(r.tokens) for r in requests)
    tokens = torch.zeros(len(requests), width, dtype=torch.long)
    scored = torch.zeros(len(requests), width - 1, dtype=torch.bool)
    for row, r in enumerate(requests):
        check_request(r)
        tokens[row, : len(r.tokens)] = torch.tensor(r.tokens)
        scored[row, len(r.tokens) - 1 - r.n_scored : len(r.tokens) - 1] = True
    tokens, scored = tokens.to(device), scored.to(device)
    hidden = body(tokens[:, :-1])[scored]  # (N, D), or (N, V) without a head
    rows = torch.arange(len(requests), device=device)[:, None].expand_as(scored)[scored]
    return scored_sums(hidden, tokens[:, 1:][scored], rows, len(requests), head)


# ---- Shared prefixes: a question's choices are scored after the same few-shot context --------------------------

PrefixForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""`(prefixes (G, P), prefix_lens (G,), suffixes (N, S), group (N,)) -> hidden (N, S, D)`: the prefixes run
once (right-padded, causal), their keys and values are kept, and each suffix row attends to the first
`prefix_lens[group[row]]` cached positions of its group's prefix and causally to itself, at positions
that continue the prefix. The hidden states equal those of the whole sequence's plain forward."""


def prefix_groups(requests: Sequence[Request]) -> list[tuple[int, list[int]]]:
    """(shared prefix length, request indices): runs of consecutive requests (tasks emit an item's
    requests together) whose common token prefix is at least half the group's so far. The shared prefix
    stops before the input position of each member's first scored token, whose logits it needs."""
    groups: list[tuple[int, list[int]]] = []
    for i, r in enumerate(requests):
        check_request(r)
        limit = len(r.tokens) - r.n_scored - 1  # inputs 0..limit-1 are only context
        if groups:
            shared, members = groups[-1]
            first = requests[members[0]].tokens
            common = 0
            bound = min(shared, limit)
            while common < bound and first[common] == r.tokens[common]:
                common += 1
            if common >= 1 and 2 * common >= shared:
                groups[-1] = (common, [*members, i])
                continue
        groups.append((limit, [i]))
    return groups


@torch.inference_mode()
def score_prefix_batch(
    body: PrefixForward,
    head: Forward | None,
    requests: Sequence[Request],
    groups: Sequence[tuple[int, list[int]]],
    device: torch.device | str,
) -> list[Score]:
    """One prefix pass and one suffix pass over `groups`; the scores of their members, in group order."""
    members = [(g, i) for g, (_, idx) in enumerate(groups) for i in idx]
    widths = [len(requests[i].tokens) - 1 - groups[g][0] for g, i in members]  # suffix inputs
    prefixes = torch.zeros(len(groups), max(p for p, _ in groups), dtype=torch.long)
    suffixes = torch.zeros(len(members), max(widths), dtype=torch.long)
    scored = torch.zeros(len(members), max(widths), dtype=torch.bool)
    targets = torch.zeros(len(members), max(widths), dtype=torch.long)
    for g, (shared, idx) in enumerate(groups):
        prefixes[g, :shared] = torch.tensor(requests[idx[0]].tokens[:shared])
    for row, ((g, i), width) in enumerate(zip(members, widths, strict=True)):
        r, shared = requests[i], groups[g][0]
        suffixes[row, :width] = torch.tensor(r.tokens[shared:-1])
        targets[row, :width] = torch.tensor(r.tokens[shared + 1 :])
        scored[row, width - r.n_scored : width] = True
    lens = torch.tensor([p for p, _ in groups])
    group = torch.tensor([g for g, _ in members])
    prefixes, lens, suffixes, group = (t.to(device) for t in (prefixes, lens, suffixes, group))
    scored, targets = scored.to(device), targets.to(device)
    hidden = body(prefixes, lens, suffixes, group)[scored]
    rows = torch.arange(len(members), device=device)[:, None].expand_as(scored)[scored]
    return scored_sums(hidden, targets[scored], rows, len(members), head)


def prefix_batches(
    groups: Sequence[tuple[int, list[int]]], batch_size: int, max_batch_tokens: int
) -> list[list[tuple[int, list[int]]]]:
    """Groups, longest prefix first, at most `batch_size` prefixes and `max_batch_tokens` padded prefix tokens each."""
    batches: list[list[tuple[int, list[int]]]] = []
    for group in sorted(groups, key=lambda g: -g[0]):
        cur = batches[-1] if batches else None
        if cur is not None and len(cur) < batch_size and (len(cur) + 1) * cur[0][0] <= max_batch_tokens:
            cur.append(group)
        else:
            batches.append([group])
    return batches


def make_scorer(
    body: Forward,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    max_batch_tokens: int = 16384,
    progress: Callable[[int], None] | None = None,
    head: Forward | None = None,
    prefix_body: PrefixForward | None = None,
) -> ScoreFn:
    """A `ScoreFn` over the model; `progress(n)` is called after each batch with its number of requests.
    With `prefix_body`, requests that share a token prefix (`prefix_groups`) encode it once; the rest
    run the plain path."""

    def plain(requests: Sequence[Request], indices: Sequence[int], out: list[float]) -> None:
        for batch in length_batches([requests[i] for i in indices], batch_size, max_batch_tokens):
            values = score_batch(body, head, [requests[indices[j]] for j in batch], device)
            for j, value in zip(batch, values, strict=True):
                out[indices[j]] = value
            if progress is not None:
                progress(len(batch))

    def score(requests: Sequence[Request]) -> list[float]:
        out = [0.0] * len(requests)
        if prefix_body is None:
            plain(requests, range(len(requests)), out)
            return out
        groups = prefix_groups(requests)
        shared = [g for g in groups if len(g[1]) > 1 and g[0] >= 1]
        plain(requests, [g[1][0] for g in groups if len(g[1]) == 1 or g[0] < 1], out)
        for batch in prefix_batches(shared, batch_size, max_batch_tokens):
            values = score_prefix_batch(prefix_body, head, requests, batch, device)
            for i, value in zip((i for _, idx in batch for i in idx), values, strict=True):
                out[i] = value
            if progress is not None:
                progress(len(values))
        return out

    return score
