"""Shared-prefix scoring (a question's choices encode their few-shot context once) gives the plain path's
scores: on a random model with grouped-query attention, qk-norm and MoE layers, and on the CORE suite,
BLiMP and the MC example with the evals tests' trained model."""

from __future__ import annotations

import random

import pytest
import torch

from evals.models import load_model, prefix_forward, split_head
from evals.scoring import make_scorer, prefix_groups
from evals.tasks import evaluate, load_task
from evals.tasks.base import Request, task_totals
from tests.evals.conftest import shared_or_skip


def test_groups_are_runs_that_share_most_of_their_context() -> None:
    shots = tuple(range(100, 140))
    reqs = [
        Request((1, *shots, 7, 8), 2),  # item 1: two choices after 41 shared tokens
        Request((1, *shots, 9), 1),
        Request((1, 5, 6, 7), 1),  # item 2: shares only the prefix token with item 1
        Request((1, 5, 6, 8, 9), 2),
        Request((1, 2), 1),  # nothing but the prefix token before its only scored token
    ]
    # the shared prefix stops before the input position of every member's first scored token (it needs its logits)
    assert prefix_groups(reqs) == [(40, [0, 1]), (2, [2, 3]), (0, [4])]


def tiny_config(**changes):
    from trainer.config import ModelConfig

    base = {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 64, "vocab_size": 97, "max_seq_len": 64}
    return ModelConfig(**{**base, **changes})


@pytest.mark.parametrize(
    "changes",
    [{}, {"qk_norm": True, "n_kv_heads": 1}, {"moe_experts": 4, "moe_top_k": 2, "moe_every": 2}],
    ids=["gqa", "qk-norm-mqa", "moe"],
)
def test_prefix_scores_equal_plain_scores_on_a_random_model(changes) -> None:
    from trainer.model import Transformer

    torch.manual_seed(0)
    model = Transformer(tiny_config(**changes))
    model.init_weights()
    body, head = split_head(model.eval())
    rng = random.Random(0)
    requests = []
    for _ in range(12):  # items of 2-5 choices with contexts of 5-50 tokens and continuations of 1-9
        context = [rng.randrange(97) for _ in range(rng.randint(5, 50))]
        for _ in range(rng.randint(2, 5)):
            cont = [rng.randrange(97) for _ in range(rng.randint(1, 9))]
            requests.append(Request(tuple(context + cont), len(cont)))
    plain = make_scorer(body, head=head, batch_size=5)(requests)
    shared = make_scorer(body, head=head, batch_size=5, prefix_body=prefix_forward(body))(requests)
    assert shared == pytest.approx(plain, abs=1e-4)
    assert [s.greedy for s in shared] == [s.greedy for s in plain]


@pytest.fixture(scope="module")
def ours(tiny_model):
    return load_model(tiny_model.hf_dir, backend="ours", device="cpu")


def recording(score):
    """The scorer, keeping the requests it saw and the scores it gave."""
    seen: list = []

    def wrapped(requests):
        out = score(requests)
        seen.append((list(requests), out))
        return out

    return wrapped, seen


def test_core_suite_scores_equal_with_and_without_the_prefix_cache(ours) -> None:
    suite = load_task("core", shared_or_skip("core_tasks"))
    items = list(range(54))  # 3 rows of each of the 18 tasks: every format, 0- to 10-shot
    plain, plain_seen = recording(ours.scorer(batch_size=16, share_prefix=False))
    shared, shared_seen = recording(ours.scorer(batch_size=16))
    totals = [task_totals(suite, ours.encoder, score, items) for score in (plain, shared)]
    (requests, plain_scores), (same_requests, shared_scores) = plain_seen[0], shared_seen[0]
    assert requests == same_requests
    assert max(abs(a - b) for a, b in zip(shared_scores, plain_scores, strict=True)) < 1e-4
    assert [s.greedy for s in shared_scores] == [s.greedy for s in plain_scores]
    groups = prefix_groups(requests)
    assert sum(len(m) for p, m in groups if len(m) > 1) > len(requests) // 2  # the cache is actually used
    accuracies = [{k: v for k, v in t.items() if k.endswith("/acc")} for t in totals]
    assert accuracies[1] == accuracies[0]
    assert totals[1] == pytest.approx(totals[0], rel=1e-6, abs=1e-8)


def flat(metrics: dict, at: str = "") -> dict:
    out = {}
    for key, value in metrics.items():
        out.update(flat(value, f"{at}{key}/") if isinstance(value, dict) else {at + key: value})
    return out


def test_mc_and_blimp_metrics_equal_with_and_without_the_prefix_cache(ours) -> None:
    for name, path in (("mc", "examples/evals/mc_example.jsonl"), ("blimp", shared_or_skip("blimp", "blimp.jsonl.gz"))):
        task = load_task(name, path)
        plain = flat(evaluate(task, ours.encoder, ours.scorer(32, share_prefix=False), limit=200))
        shared = flat(evaluate(task, ours.encoder, ours.scorer(32), limit=200))
        assert shared == pytest.approx(plain, rel=1e-6)
