"""The split pattern: digit groups, the space before numbers, and what stays apart."""

from __future__ import annotations

import pytest
from tokenizers import Regex, pre_tokenizers

from tokenizer.pattern import split_pattern


def pieces(text: str, **kwargs: object) -> list[str]:
    splitter = pre_tokenizers.Split(Regex(split_pattern(**kwargs)), behavior="isolated")  # type: ignore[arg-type]
    return [p for p, _ in splitter.pre_tokenize_str(text)]


def test_digits_group_by_three_by_default() -> None:
    out = pieces("population 1234567 in 2019")
    assert out == ["population", " 123", "456", "7", " in", " 201", "9"]
    assert all(sum(c.isdigit() for c in p) <= 3 for p in out)


def test_digit_group_size_is_configurable() -> None:
    assert pieces("x 12345", max_digits=2) == ["x", " 12", "34", "5"]
    assert pieces("x 12345", max_digits=None) == ["x", " 12345"]
    with pytest.raises(ValueError):
        split_pattern(max_digits=0)


def test_gpt4_exact_numbers_leave_the_space_alone() -> None:
    assert pieces("in 2019", number_space=False) == ["in", " ", "201", "9"]


def test_words_contractions_punctuation_and_newlines() -> None:
    assert pieces("We'LL see (maybe).\n\nOk") == ["We'LL", " see", " (", "maybe", ").\n\n", "Ok"]
    assert pieces("a   b") == ["a", "  ", " b"]
    assert pieces("We'LL see", words="gpt4") == ["We", "'LL", " see"]


def test_gpt4o_words_split_at_case_changes_and_keep_slashes_with_punctuation() -> None:
    assert pieces("JavaScript iPhone HTML") == ["Java", "Script", " i", "Phone", " HTML"]
    assert pieces("see https://x.org") == ["see", " https", "://", "x", ".org"]
    assert pieces("JavaScript", words="gpt4") == ["JavaScript"]
    with pytest.raises(ValueError):
        split_pattern(words="gpt2")


def test_combining_marks_stay_inside_words() -> None:
    assert pieces("नमस्ते दुनिया") == ["नमस्ते", " दुनिया"]
    assert pieces("cafe\u0301 ok") == ["cafe\u0301", " ok"]


@pytest.mark.parametrize("words", ["gpt4o", "gpt4"])
def test_every_character_lands_in_exactly_one_piece(words: str) -> None:
    text = "Grüße, 東京 2024 — naïve café 😀!\r\n\tend  don't O'Neil's McDonald's"
    assert "".join(pieces(text, words=words)) == text
