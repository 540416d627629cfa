"""Our numbers against independent computations on a real trained model (see conftest.tiny_model)."""

from __future__ import annotations

import math

import pytest

from evals.models import load_model
from evals.tasks import BitsPerByte, Blimp, MultipleChoice, evaluate
from tests.evals.helpers import MC_EXAMPLE, TransformersOracle, blimp_spread


@pytest.fixture(scope="module")
def ours(tiny_model):
    return load_model(tiny_model.hf_dir, backend="ours", device="cpu")


@pytest.fixture(scope="module")
def oracle(tiny_model):
    return TransformersOracle(tiny_model.hf_dir)


def test_per_sequence_logprobs_equal_a_plain_transformers_forward(ours, oracle, tiny_model) -> None:
    """BLiMP sentences, multiple-choice continuations and bpb windows, batched by us vs one by one in transformers."""
    tasks = [Blimp(blimp_spread(150)), MultipleChoice.from_path(MC_EXAMPLE), BitsPerByte(tiny_model.unseen[:1])]
    reqs = [r for t in tasks for rs in t.requests(ours.encoder, range(len(t))) for r in rs]
    got = ours.scorer(batch_size=32)(reqs)
    want = [oracle.score(r) for r in reqs]
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"{len(reqs)} sequences, max |ours - transformers| = {diff:.2e} nats")
    assert diff <= 1e-4


def hand_bits_per_byte(text: str, ours, oracle, context: int, stride: int) -> float:
    """The documented rule written out token by token: token p (1-based, after the prefix) is scored once; its
    window ends at min(n + 1, context + 1 + k * stride) for the smallest k that covers p, and starts context
    tokens before that end (or at the prefix)."""
    seq = [ours.encoder.prefix_id, *ours.encoder.encode([text])[0]]
    n = len(seq) - 1
    nats = 0.0
    for p in range(1, n + 1):
        k = 0 if p <= context else math.ceil((p - context) / stride)
        end = min(n + 1, context + 1 + k * stride)
        start = max(0, end - 1 - context)
        nats -= oracle.token_logprobs(seq[start : p + 1])[-1]
    return nats / math.log(2) / len(text.encode("utf-8"))


@pytest.mark.parametrize(("context", "stride"), [(512, 256), (24, 8), (16, 16)])
def test_bits_per_byte_equals_a_hand_computation(ours, oracle, tiny_model, context: int, stride: int) -> None:
    text = tiny_model.unseen[0][:400]
    task = BitsPerByte([text], context=context, stride=stride)
    got = evaluate(task, ours.encoder, ours.scorer())
    want = hand_bits_per_byte(text, ours, oracle, context, stride)
    print(f"context {context} stride {stride}: ours {got['bits_per_byte']:.6f}, hand {want:.6f}")
    assert got["bytes"] == len(text.encode("utf-8"))
    assert abs(got["bits_per_byte"] - want) <= 1e-6


def test_a_memorised_text_scores_fewer_bits_per_byte(ours, tiny_model) -> None:
    score = ours.scorer()
    seen = evaluate(BitsPerByte(tiny_model.memorised, context=64), ours.encoder, score)["bits_per_byte"]
    unseen = evaluate(BitsPerByte(tiny_model.unseen, context=64), ours.encoder, score)["bits_per_byte"]
    print(f"bits per byte: memorised {seen:.3f}, unseen {unseen:.3f}")
    assert seen < unseen - 0.2
