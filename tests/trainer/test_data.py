"""Windows, the epoch, exact resume and the refusal of foreign shards, without processes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mixtures.reader import ShardReader
from tests.support.trainer_inputs import random_docs, synthetic_run_inputs, word_tokenizer, write_shards
from trainer.compat import IncompatibleShards, check_compatible, tokenizer_identity
from trainer.data import EpochLoader, EpochPlan, WindowIndex, validation_batches

SEQ = 32


@pytest.fixture()
def shards(tmp_path: Path) -> tuple[Path, Path]:
    return synthetic_run_inputs(tmp_path, vocab=96, n_docs=150, seq_len=SEQ)


def test_windows_are_datatroves_windows(shards: tuple[Path, Path]) -> None:
    from datatrove.utils.dataset import DatatroveFolderDataset

    index = WindowIndex(ShardReader(shards[0]), SEQ)
    oracle = DatatroveFolderDataset(str(shards[0]), seq_len=SEQ, token_size=2)
    assert index.num_windows == len(oracle)
    for w in range(index.num_windows):
        np.testing.assert_array_equal(index.tokens(w), oracle[w]["input_ids"].numpy())


def test_epoch_steps_derive_from_tokens_and_global_batch(shards: tuple[Path, Path]) -> None:
    reader = ShardReader(shards[0])
    index = WindowIndex(reader, SEQ)
    per_file = [f.tokens // (SEQ + 1) for f in reader.manifest.files]
    assert index.num_windows == sum(per_file)
    assert index.tail_tokens == sum(f.tokens % (SEQ + 1) for f in reader.manifest.files)
    plan = EpochPlan(index.num_windows, micro_batch=3, grad_accum=2, world_size=2, seq_len=SEQ)
    assert plan.global_batch == 12
    assert plan.steps == index.num_windows // 12
    assert plan.dropped_windows == index.num_windows % 12
    assert f"dropped {plan.dropped_windows} windows" in plan.describe(index.tail_tokens)


def _all_ids(loaders: list[EpochLoader]) -> list[list[int]]:
    """Per step, the window ids of every rank's micro-batches."""
    return [[int(w) for rank_step in step for ids, _ in rank_step for w in ids] for step in zip(*loaders, strict=True)]


def test_every_window_once_across_ranks_and_the_same_set_at_any_world_size(shards: tuple[Path, Path]) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    seen_by_world = {}
    for world in (1, 2, 4):
        plan = EpochPlan(index.num_windows, micro_batch=8 // world, grad_accum=2, world_size=world, seq_len=SEQ)
        loaders = [EpochLoader(index, plan, rank, seed=7) for rank in range(world)]
        steps = _all_ids(loaders)
        flat = [w for s in steps for w in s]
        assert len(flat) == len(set(flat)) == plan.steps * plan.global_batch
        seen_by_world[world] = [sorted(s) for s in steps]
    assert seen_by_world[1] == seen_by_world[2] == seen_by_world[4]  # same global batch per step


def test_batches_hold_the_windows_they_name(shards: tuple[Path, Path]) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    plan = EpochPlan(index.num_windows, 4, 1, 1, SEQ)
    ids, tokens = next(iter(EpochLoader(index, plan, 0, seed=3)))[0]
    assert tokens.shape == (4, SEQ + 1)
    for row, w in zip(tokens, ids, strict=True):
        np.testing.assert_array_equal(row.numpy(), index.tokens(int(w)))


def test_resume_from_consumed_counter_continues_the_same_order(shards: tuple[Path, Path]) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    plan = EpochPlan(index.num_windows, 4, 2, 2, SEQ)
    full = [[ids.tolist() for ids, _ in step] for step in EpochLoader(index, plan, 1, seed=5)]
    first = EpochLoader(index, plan, 1, seed=5)
    head = []
    for step in first:
        head.append([ids.tolist() for ids, _ in step])
        if first.step == 3:
            break
    resumed = EpochLoader(index, plan, 1, seed=5)
    resumed.load_state_dict(first.state_dict())
    tail = [[ids.tolist() for ids, _ in step] for step in resumed]
    assert head + tail == full


@pytest.mark.parametrize(("key", "value"), [("seed", 6), ("global_batch", 32), ("num_windows", 1)])
def test_resume_refuses_a_different_order(shards: tuple[Path, Path], key: str, value: int) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    loader = EpochLoader(index, EpochPlan(index.num_windows, 4, 2, 2, SEQ), 0, seed=5)
    state = {**loader.state_dict(), key: value}
    with pytest.raises(ValueError, match=key):
        loader.load_state_dict(state)


def test_too_few_tokens_for_one_batch_is_an_error(shards: tuple[Path, Path]) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    with pytest.raises(ValueError, match="cannot fill"):
        EpochLoader(index, EpochPlan(index.num_windows, index.num_windows + 1, 1, 1, SEQ), 0, seed=0)


def test_validation_batches_are_equal_per_rank_and_disjoint(shards: tuple[Path, Path]) -> None:
    index = WindowIndex(ShardReader(shards[0]), SEQ)
    a = validation_batches(index, 4, 5, 0, 2)
    b = validation_batches(index, 4, 5, 1, 2)
    assert len(a) == len(b) == 5
    rows = {tuple(r.tolist()) for batch in a + b for r in batch}
    assert len(rows) == 40


def test_refuses_shards_of_another_tokenizer(tmp_path: Path, shards: tuple[Path, Path]) -> None:
    manifest = ShardReader(shards[0]).manifest
    other = tokenizer_identity(word_tokenizer(tmp_path / "other" / "tokenizer.json", 97))
    with pytest.raises(IncompatibleShards, match="sha256"):
        check_compatible(manifest, other, 128)


def test_refuses_vocab_and_dtype_mismatches(shards: tuple[Path, Path]) -> None:
    manifest = ShardReader(shards[0]).manifest
    tok = tokenizer_identity(shards[1])
    check_compatible(manifest, tok, 128)  # the matching case passes
    with pytest.raises(IncompatibleShards, match="model embeds"):
        check_compatible(manifest, tok, 64)
    with pytest.raises(IncompatibleShards, match="vocab_size"):
        check_compatible(replace(manifest, tokenizer=replace(manifest.tokenizer, vocab_size=95)), tok, 128)
    big = replace(tok, vocab_size=70_000)
    wide = replace(manifest, tokenizer=replace(manifest.tokenizer, vocab_size=70_000))
    with pytest.raises(IncompatibleShards, match="uint16"):
        check_compatible(wide, big, 70_016)


def test_uint32_shards_read_back(tmp_path: Path) -> None:
    tok = word_tokenizer(tmp_path / "tok.json", 96)
    write_shards(tmp_path / "s", random_docs(40, 96, seed=2), tok, seq_len=SEQ, token_dtype="uint32")
    reader = ShardReader(tmp_path / "s")
    index = WindowIndex(reader, SEQ)
    assert reader.manifest.token_size == 4
    assert index.batch(np.array([0, 1])).max() < 96
