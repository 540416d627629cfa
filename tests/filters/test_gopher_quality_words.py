"""Gopher quality's per-word tests, done with ``str.strip``, equal datatrove's generator tests."""

from __future__ import annotations

import sys

from datatrove.utils.text import PUNCTUATION_SET
from hypothesis import given, settings
from hypothesis import strategies as st

from filters.gopher_quality import PUNCTUATION, has_letter


def is_symbol_only(word: str) -> bool:
    return not word.strip(PUNCTUATION)


def test_every_character_alone() -> None:
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert has_letter(char) == char.isalpha(), hex(code)
        assert is_symbol_only(char) == (char in PUNCTUATION_SET), hex(code)


# words mixing ASCII, punctuation, letters and digits of other scripts, and marks
CHARACTERS = st.sampled_from(sorted(PUNCTUATION_SET) + list("aZ09_ é²½Ⅻ漢字٣ـ\u0301\u200d😀"))


@settings(max_examples=500, deadline=None)
@given(st.text(CHARACTERS, min_size=1, max_size=8) | st.text(min_size=1, max_size=8))
def test_words(word: str) -> None:
    assert has_letter(word) == any(c.isalpha() for c in word)
    assert is_symbol_only(word) == (not any(ch not in PUNCTUATION_SET for ch in word))
