"""The Gopher repetition counts, computed over hashes and word ids, equal datatrove's string walks."""

from __future__ import annotations

import random

import numpy as np
import pytest
from datatrove.pipeline.filters.gopher_repetition_filter import find_all_duplicate, find_top_duplicate, get_n_grams

from filters import gopher_repetition
from filters.gopher_repetition import JoinedGrams, duplicated_ngram_chars, top_ngrams_chars

CASES = [
    [],
    ["one"],
    "a b c d e f g h i j".split(),
    "the cat sat on the mat and the cat sat on the mat again".split(),
    # different word splits of the same characters are the same joined gram in datatrove's walk
    ["ab", "c", "d", "e", "f", "x", "a", "bc", "d", "e", "f", "y", "ab", "c", "d", "e", "f"],
    ["é", "ü", "漢字", "😀", "é", "ü", "漢字", "😀", "é", "ü", "漢字", "😀"] * 3,
    ["x"] * 40,
    # ties: equally frequent n-grams, the first seen wins
    "p q r s p q r s u v w z u v w z".split(),
]


def random_words(seed: int) -> list[str]:
    rng = random.Random(seed)
    vocab = ["a", "b", "ab", "ba", "aa", "the", "cat", "c", "at"]
    return [rng.choice(vocab) for _ in range(rng.randint(0, 300))]


@pytest.mark.parametrize("words", CASES + [random_words(seed) for seed in range(40)])
def test_counts_equal_datatrove(words: list[str]) -> None:
    expected_dup = {n: find_all_duplicate(words, n) for n in range(1, 11)}
    assert duplicated_ngram_chars(words, tuple(range(1, 11))) == expected_dup  # every n in one pass
    grams = JoinedGrams(words)
    for n in range(1, 11):
        assert duplicated_ngram_chars(words, (n,), grams) == {n: expected_dup[n]}, n
    together = top_ngrams_chars(words, (1, 2, 3, 4))  # n > 1 counted only where the (n-1)-gram repeats
    for n in (1, 2, 3, 4):
        expected = find_top_duplicate(get_n_grams(words, n)) if len(words) >= n else 0
        assert top_ngrams_chars(words, (n,))[n] == expected, n
        assert together[n] == expected, n
    assert top_ngrams_chars(words, (2, 4)) == {n: together[n] for n in (2, 4)}


def test_hash_collision_falls_back_to_the_string_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every gram hashing alike must not make different grams repeats: the strings decide."""
    words = "the cat sat on the mat and the cat sat on the mat again".split()
    monkeypatch.setattr(JoinedGrams, "hashes", lambda self, n: np.zeros(len(self.offsets) - n, dtype=np.uint64))
    assert duplicated_ngram_chars(words, (2, 3, 5)) == {n: find_all_duplicate(words, n) for n in (2, 3, 5)}


def test_many_distinct_words_use_the_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    words = [f"w{i}" for i in range(70_000)] + ["w1", "w2", "w3"]
    called = []
    original = gopher_repetition._top_ngram_chars_counter
    monkeypatch.setattr(
        gopher_repetition, "_top_ngram_chars_counter", lambda w, n: called.append(n) or original(w, n)
    )
    assert top_ngrams_chars(words, (4,))[4] == find_top_duplicate(get_n_grams(words, 4))
    assert called == [4]
    assert top_ngrams_chars(words, (4, len(words) + 1))[len(words) + 1] == 0  # longer than the text, as datatrove


@pytest.mark.parametrize("seed", range(5))
def test_few_buckets_leave_more_candidates_not_other_counts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 64 buckets most distinct grams share one: the sort sees them all, the counts stay datatrove's."""
    monkeypatch.setattr(gopher_repetition, "MAX_BUCKET_BITS", 6)
    words = random_words(seed) * 2
    assert duplicated_ngram_chars(words, tuple(range(1, 11))) == {n: find_all_duplicate(words, n) for n in range(1, 11)}
    for n in (2, 3, 4):
        assert top_ngrams_chars(words, (n,))[n] == find_top_duplicate(get_n_grams(words, n))
