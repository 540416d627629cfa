"""The task layer's arithmetic: windows, batching, tallies, sharded totals (no model or a real tiny one)."""

from __future__ import annotations

import math

import pytest

from evals.scoring import length_batches
from evals.tasks import BitsPerByte, Blimp, MultipleChoice, TaskDataError, task_totals
from evals.tasks.base import Request, shard_items, totals_from_vector, totals_vector
from evals.tasks.bpb import rolling_windows
from tests.evals.helpers import MC_EXAMPLE, blimp_spread


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 17, 33, 100])
@pytest.mark.parametrize(("context", "stride"), [(1, 1), (4, 1), (4, 4), (8, 3), (16, 8), (16, 16)])
def test_rolling_windows_score_every_token_once_within_the_context(n: int, context: int, stride: int) -> None:
    seq = list(range(100, 101 + n))  # prefix + n tokens, all distinct
    windows = rolling_windows(seq, context, stride)
    scored = [t for w in windows for t in w.tokens[len(w.tokens) - w.n_scored :]]
    assert scored == seq[1:]
    for w in windows:
        assert len(w.tokens) - 1 <= context and 1 <= w.n_scored <= len(w.tokens) - 1
        start = seq.index(w.tokens[0])
        assert list(w.tokens) == seq[start : start + len(w.tokens)]  # contiguous
    for w in windows[1:]:  # after the first window, scored tokens keep >= context - stride tokens behind them
        assert len(w.tokens) - 1 - w.n_scored >= context - stride


def test_length_batches_respect_both_limits() -> None:
    reqs = [Request(tuple(range(n)), 1) for n in (5, 30, 2, 30, 7, 12, 12, 3)]
    batches = length_batches(reqs, batch_size=3, max_batch_tokens=64)
    assert sorted(i for b in batches for i in b) == list(range(len(reqs)))
    for b in batches:
        widths = [len(reqs[i].tokens) for i in b]
        assert len(b) <= 3 and len(b) * max(widths) <= 64 and widths[0] == max(widths)


def test_bad_task_data_is_refused(tmp_path) -> None:
    with pytest.raises(TaskDataError, match="choices"):
        MultipleChoice([{"context": "x", "choices": ["only one"], "gold": 0}])
    with pytest.raises(TaskDataError, match="gold"):
        MultipleChoice([{"context": "x", "choices": ["a", "b"], "gold": 2}])
    with pytest.raises(TaskDataError, match="sentence_bad"):
        Blimp([{"sentence_good": "a", "field": "f", "UID": "u"}])
    (tmp_path / "no_text.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(TaskDataError, match="text"):
        BitsPerByte.from_path(tmp_path / "no_text.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TaskDataError, match="empty"):
        MultipleChoice.from_path(tmp_path / "empty.jsonl")


def test_mc_acc_and_acc_norm_follow_lm_eval_rules() -> None:
    """acc: argmax of summed log-probs; acc_norm: argmax after dividing by the choice's characters."""
    task = MultipleChoice([{"context": "Q:", "choices": ["a", "bbbbbbbbbb"], "gold": 1}])
    tally = task.tally(0, [-2.0, -10.0])
    assert {k: tally[k] for k in ("acc", "acc_norm", "n")} == {"acc": 0.0, "acc_norm": 1.0, "n": 1.0}  # -2/1 < -10/10
    assert tally["gold_prob"] == pytest.approx(math.exp(-10) / (math.exp(-2) + math.exp(-10)))
    assert task.metrics(tally)["gold_bpb"] == pytest.approx(10 / math.log(2) / len(" bbbbbbbbbb"))
    assert task.tally(0, [-3.0, -3.0])["acc"] == 0.0  # a tie goes to the first choice, as numpy.argmax
    blimp = Blimp([{"sentence_good": "a", "sentence_bad": "b", "field": "f", "UID": "u"}])
    assert blimp.tally(0, [-1.0, -1.0])["right"] == 1.0  # lm-eval: argmax picks the good sentence on a tie


def test_sharded_totals_equal_the_single_process_ones(tiny_model) -> None:
    """Two 'ranks' score their shares; summing their totals vectors (what all-reduce does) gives the same metrics."""
    from evals.models import load_model

    model = load_model(tiny_model.hf_dir, backend="ours", device="cpu")
    score = model.scorer(batch_size=16)
    tasks = [Blimp(blimp_spread(60)), MultipleChoice.from_path(MC_EXAMPLE), BitsPerByte(tiny_model.unseen[:3])]
    for task in tasks:
        whole = task.metrics(task_totals(task, model.encoder, score, range(len(task))))
        shares = [task_totals(task, model.encoder, score, shard_items(len(task), r, 2)) for r in range(2)]
        summed = [a + b for a, b in zip(*(totals_vector(task, s) for s in shares), strict=True)]
        sharded = task.metrics(totals_from_vector(task, summed))
        assert sharded.keys() == whole.keys()
        for key, value in whole.items():
            if isinstance(value, float):  # continuous metrics see fp32 noise of other batch shapes (~1e-7)
                tol = 1e-6 if key.startswith("gold_") else 1e-9
                assert math.isclose(sharded[key], value, rel_tol=tol), (task.name, key)
            else:
                assert sharded[key] == value, (task.name, key)


def test_padding_and_batching_do_not_change_scores(tiny_model) -> None:
    from evals.models import load_model

    model = load_model(tiny_model.hf_dir, backend="ours", device="cpu")
    task = Blimp(blimp_spread(80))
    reqs = [r for rs in task.requests(model.encoder, range(len(task))) for r in rs]
    one = model.scorer(batch_size=1)(reqs)
    batched = model.scorer(batch_size=64)(reqs)
    assert max(abs(a - b) for a, b in zip(one, batched, strict=True)) <= 1e-4
