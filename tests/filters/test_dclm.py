"""DCLM-Baseline's heuristics (filters/dclm.py): each rule on pages built to sit on either side of it, and the
n-gram signals against a plain Counter implementation of Gopher's definitions as DCLM states them.
Parity with DCLM's own code on real pages is ``python -m bench.dclm_parity`` (its code is not in the project)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from filters.dclm import (
    DUP_NGRAMS,
    FAMILY,
    SIGNALS,
    TOP_NGRAMS,
    DclmRule,
    _ngram_ratios,
    counted_words,
    edit_lines,
    judge,
    remove_urls,
    segment_words,
)

PROSE = (
    "The committee met on Tuesday to review the budget and the plans that have been drafted with care. "
    "Members of the public were invited to comment on the proposals, and many of them did so in writing. "
    "A final decision is expected next month, after the consultation period has closed and the responses "
    "have been read by the staff of the council, who will prepare a summary of the main points raised."
)


def test_a_plain_page_is_kept_unchanged():
    verdict, columns, text = judge(PROSE)
    assert verdict is True and text == PROSE
    assert set(columns) == {f"{FAMILY}_{s}" for s in SIGNALS}
    assert columns["dclm_word_count"] == len(PROSE.split())


@pytest.mark.parametrize(
    "page, reason",
    [
        ("Too short a page with only a few words here.", "dclm_word_count"),
        (PROSE + " #tag" * 12, "dclm_symbol_word_ratio"),
        ("\n".join(["a line of the page that repeats"] * 30 + [PROSE]), "dclm_dup_line_ratio"),
        (PROSE.replace(" ", " 1 2 3 "), "dclm_mean_word_length"),
        (" ".join(f"word{i}" for i in range(60)) + " the", "dclm_stop_word_count"),
        (PROSE + "\nALPHA BRAVO CHARLIE DELTA ECHO\nFOXTROT GOLF HOTEL INDIA JULIET", "dclm_words_removed_ratio"),
    ],
)  # fmt: skip
def test_each_rule_drops_with_its_reason(page, reason):
    verdict, _, _ = judge(page)
    assert verdict == (False, reason)


def test_line_edits_as_dclm():
    lines = [PROSE, "12 likes", "ALL CAPS", "one", "", "Sign-in to comment on this", "3 items in cart", "Read more..."]
    # upper-case and counter lines out, one-word lines out, the three stubs cut from short lines
    assert edit_lines("\n".join(lines)).split("\n") == [PROSE, "", "to comment on this", "3"]


def test_urls_go_only_when_the_page_starts_with_a_tld():
    """DCLM's quirk, kept: its TLD check is a ``match`` (at the start, any case)."""
    assert remove_urls("the site example.com is down") == "the site is down"
    assert remove_urls("1. the site example.com is down") == "1. the site example.com is down"
    assert remove_urls("1. server 192.168.0.1 is down") == "1. server is down"


def test_word_counts():
    assert counted_words("a b\u00a0c , -x 1y\n\nz") == 4  # fastText splits at ASCII whitespace only
    assert segment_words("don't 'quoted' U.S. e-mail 3.5 ,") == ["don't", "quoted", "U.S", "e", "mail", "3.5"]


def test_thresholds_come_from_the_rule():
    _, columns, _ = judge("Too short a page with only a few words here.")
    assert DclmRule().check(columns) == (False, "dclm_word_count")
    assert replace(DclmRule(), min_word_count=5, min_stop_word_count=0).check(columns) is True
    with pytest.raises(ValueError, match="max_dup_line_ratio"):
        DclmRule(max_dup_line_ratio=2)


def _gopher_ngrams(words: list[str]) -> dict[str, float]:
    total = sum(map(len, words))
    out = {}
    for n in (*TOP_NGRAMS, *DUP_NGRAMS):
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        counts = Counter(grams)
        key = f"top_{n}gram_char_ratio" if n in TOP_NGRAMS else f"dup_{n}gram_char_ratio"
        if not grams or max(counts.values()) == 1:
            out[key] = 0.0
        elif n in TOP_NGRAMS:
            top = max(counts.values())
            out[key] = max(sum(map(len, g)) for g, c in counts.items() if c == top) * top / total
        else:
            covered = {j for i, g in enumerate(grams) if counts[g] > 1 for j in range(i, i + n)}
            out[key] = sum(len(words[j]) for j in covered) / total
    return out


def test_ngram_signals_match_the_plain_definition():
    rng = random.Random(7)
    vocabulary = ["a", "bb", "ccc", "dddd", "the", "of", "x"]
    for _ in range(200):
        words = [rng.choice(vocabulary[: rng.randint(2, 7)]) for _ in range(rng.randint(0, 60))]
        assert _ngram_ratios(words) == pytest.approx(_gopher_ngrams(words))
