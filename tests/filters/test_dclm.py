"""DCLM-Baseline's heuristics (filters/dclm.py): each rule on pages built to sit on either side of it, and the
n-gram signals against a plain Counter implementation of Gopher's definitions as DCLM states them.
Parity with DCLM's own code on real pages is ``python -m bench.dclm_parity`` (its code is not in the project)."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from datatrove.data import Document
from hypothesis import given, settings
from hypothesis import strategies as st

from filters import dclm
from filters.dclm import (
    _MAY_HOLD_IP,
    _STOP_WORD_CASES,
    _STUB_LITERALS,
    _STUBS,
    _STUBS_IN_PAGE,
    _WORD_BOUNDARY,
    DUP_NGRAMS,
    FAMILY,
    SIGNALS,
    STOP_WORDS,
    TOP_NGRAMS,
    DclmRule,
    _bmp_units,
    _mostly_not_upper,
    _ngram_ratios,
    _url_patterns,
    counted_words,
    edit_lines,
    judge,
    remove_urls,
    segment_words,
    sub_in_segments,
    words_without_letter,
)
from filters.gopher_quality import has_letter
from filters.quality import QualitySignals, dclm_signals
from pipelines.recipe import load_recipe

DCLM_RECIPE = Path(__file__).resolve().parents[2] / "pipelines" / "recipes" / "dclm.yaml"

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


# pieces of URLs, words and every kind of whitespace (long runs: the pattern takes at most 10 before a URL)
URL_PIECES = st.sampled_from(
    ["https://", "ftp://", "www.", "example", ".com", ".org", ".de", ".c", ".xn--p1ai", "/path?q=1&r=(2)", "a", "Z",
     "1.2.3.4", "@", ":", "%", "_", "~", "#", "=", "+", "-", ".", ",", "'", "é", "\u00a0", "\u3000", " ", "\t", "\n",
     " " * 11, "\n" * 12, "x" * 300]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(URL_PIECES, max_size=40))
def test_url_removal_by_segments_equals_the_pattern_on_the_whole_page(pieces):
    """The URL pattern run only on the segments around a dot before a TLD's letter gives the page-wide result."""
    _, urls = _url_patterns()
    page = "".join(pieces)
    assert sub_in_segments(urls, page) == urls.sub("", page)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["items in cart", "ITEMS IN CART", "read more", "Read More...", "...", "sign-in",
                                 "Sign-In", "\u0130tems", "\u0131tems in cart", "sıgn-in", "\u212a", " ", "\t", "\n",
                                 "a", "x", "\u0130TEMS \u0130N CART", "\u017fign-in", "READ MORE\u2026"]),
                max_size=20))  # fmt: skip
def test_stub_searches_without_the_optional_space_find_the_same_pages(pieces):
    """Without the optional space the searches find the same pages, and a page where one finds a match holds its
    literal once lower-cased (``edit_lines``' shortcut)."""
    page = "".join(pieces)
    for stub, in_page, literal in zip(_STUBS, _STUBS_IN_PAGE, _STUB_LITERALS, strict=True):
        with_space = re.compile(stub.pattern, re.I | re.M)
        assert bool(in_page.search(page)) == bool(with_space.search(page))
        assert not in_page.search(page) or literal in page.lower()


def test_the_stub_literals_match_only_their_ascii_case_variants():
    """No character outside ASCII matches a literal's characters under re.I (as U+0130/U+0131 match "i", U+017F "s",
    U+212A "k"), so a page whose lower() lacks a stub's literal holds no match of it."""
    every = "".join(map(chr, (*range(0xD800), *range(0xE000, 0x110000))))
    for char in set("".join(_STUB_LITERALS)):
        assert set(re.findall(re.escape(char), every, re.I)) == {char.lower(), char.upper()}


def test_word_counts():
    assert counted_words("a b\u00a0c , -x 1y\n\nz") == 4  # fastText splits at ASCII whitespace only
    edges = ("", "x", " x", "_x y", "\x00a\x00\x00b", "\u00e9t\u00e9 \u00b2 \u00bd", "a\x0bb\x0cc")
    assert [counted_words(t) for t in edges] == [0, 1, 1, 1, 2, 3, 3]


def _fasttext_words_starting_alphanumeric(text: str) -> int:
    return sum(1 for t in re.split(r"[ \n\r\t\v\f\x00]", text) if t[:1].isalnum())


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from("ab1_ \n\r\t\v\f\x00\x1c\u00a0\u2003\u00e9\u00b2-.'\ud800\u4e2d\U0001d400\U0001f600"),
        max_size=40,
    )
)
def test_word_counts_equal_fasttext_tokens_that_start_alphanumeric(text):
    """fastText's tokens: split at ASCII whitespace and NUL; counted when the first character is alphanumeric."""
    assert counted_words(text) == _fasttext_words_starting_alphanumeric(text)
    assert segment_words("don't 'quoted' U.S. e-mail 3.5 ,") == ["don't", "quoted", "U.S", "e", "mail", "3.5"]


def test_word_counts_by_code_unit_tables_equal_str_isalnum_for_every_character():
    """Every BMP character and lone surrogate (one UTF-16 unit: the tables) and characters beyond (two units: the
    pattern), first, after a separator and between letters: counted as fastText's tokens that start alphanumeric."""
    bmp, beyond = list(map(chr, range(0x10000))), list(map(chr, range(0x10000, 0x110000, 7)))
    for chars in (bmp, beyond):
        for text in ("\x00" + " ".join(chars), "a".join(chars), "".join(f"{c}\t" for c in chars), chars[-1] + "x"):
            assert counted_words(text) == _fasttext_words_starting_alphanumeric(text)
    assert counted_words(" ".join(bmp)) == sum(map(str.isalnum, bmp))


def _split_segments(text: str) -> list[str]:
    """``segment_words`` as DCLM's definition reads: every word-boundary piece, its leading quotes stripped, kept when
    it starts alphanumeric."""
    stripped = (piece.lstrip("'\u2018\u2019") for piece in _WORD_BOUNDARY.split(text))
    return [q for q in stripped if q[:1].isalnum()]


EVERY_CHARACTER = "".join(map(chr, range(0x110000)))  # lone surrogates too


def test_page_tables_equal_the_per_word_and_per_line_tests_for_every_character():
    """Every character (BMP ones by the code unit tables, the others by the per-word and per-line fallbacks), alone,
    between letters, after spaces and in runs: words without a letter (``has_letter``), lines mostly upper-case
    (``str.isupper`` per character, as DCLM counts) and the segments (``_WORD_SEGMENT``) as the plain definitions."""
    bmp, beyond = EVERY_CHARACTER[:0x10000], EVERY_CHARACTER[0x10000:]
    for chars in (bmp, beyond[::7]):
        for text in (" ".join(chars), "a".join(chars), "\n".join(f"{c}{c}A" for c in chars), "'" + "\n'".join(chars)):
            words, lines = text.split(), text.split("\n")
            units = _bmp_units(text)
            assert (units is None) == (chars is not bmp)
            assert words_without_letter(words, units) == sum(not has_letter(w) for w in words)
            upper = [not ln or sum(map(str.isupper, ln)) / len(ln) <= 0.5 for ln in lines]
            assert list(_mostly_not_upper(text, lines)) == upper
            assert segment_words(text) == _split_segments(text)


def test_stop_words_are_found_by_their_ascii_case_variants():
    """``w.lower() in STOP_WORDS`` holds only for ASCII words: no character outside ASCII lowers to ASCII letters alone
    but U+212A (to "k", in no stop word)."""
    to_ascii = {c for c in EVERY_CHARACTER if not c.isascii() and c.lower().isascii()}
    assert to_ascii == {"\u212a"} and "k" not in "".join(STOP_WORDS)
    assert _STOP_WORD_CASES == {w for w in _STOP_WORD_CASES if w.lower() in STOP_WORDS}
    assert len(_STOP_WORD_CASES) == sum(2 ** len(w) for w in STOP_WORDS)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*"aZ1.,:'_-", " ", "\n", "\r\n", "\u2019", "\u00a0", "\u0301", "\u200d", "\u00b2", "\u4e2d", "\u05d0"]
            + ["\U0001f600", "\U0001f1fa", "don't", "U.S.", "3.14", "10.0.0.1", "1.2.3"]
        ),
        max_size=40,
    ).map("".join)
)
def test_word_segments_and_the_ip_search_equal_their_plain_patterns(text):
    """The words found in one pass equal the split's pieces, and the IPv4 pre-check searched from its first dot finds
    a match exactly when the plain pattern does."""
    assert segment_words(text) == _split_segments(text)
    assert bool(_MAY_HOLD_IP.search(text)) == bool(re.search(r"\d\.\d{1,3}\.\d{1,3}\.\d", text))


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


def test_ngram_signals_match_the_plain_definition_past_64_bit_keys():
    """Pages of 90 to 3,000 distinct words, with repeated runs: from some n on (7 to 10), n word ids no longer pack
    into 64 bits and the keys are mixed sums, each n's extended from the (n - 1)-grams' on both sides of that switch."""
    rng = random.Random(11)
    for _ in range(40):
        vocabulary = [f"w{i}" for i in range(rng.randint(90, 3000))]
        run = rng.choices(vocabulary, k=rng.randint(8, 25))
        words = []
        for _ in range(rng.randint(2, 5)):
            words += rng.choices(vocabulary, k=rng.randint(0, len(vocabulary))) + run[: rng.randint(1, len(run))]
        assert _ngram_ratios(words) == pytest.approx(_gopher_ngrams(words))
    # an n-gram seen once beside a repeated one with the same first n - 1 words, where both are keyed (the
    # (n - 1)-gram one word on repeats too): an extended key that left out the last word would count them as one
    fresh = (f"u{i}" for i in range(10**6))
    for n in range(5, 11):
        run = [f"r{i}" for i in range(n - 1)]
        words = []
        for part in (run + ["x"], run + ["x"], run + ["y"], ["z", *run[1:], "y"]):
            words += [*part, *(next(fresh) for _ in range(1000))]
        assert _ngram_ratios(words) == pytest.approx(_gopher_ngrams(words))


def test_the_signals_step_reads_the_tld_list_before_its_sandbox_forks():
    """Its child inherits the compiled URL patterns (the signals are computed there, equal to the in-process ones)."""
    dclm._url_patterns.cache_clear()
    step = QualitySignals(load_recipe(DCLM_RECIPE).curate.signals)
    page = PROSE + " See www.example.com/about for more."  # it starts with a TLD (.th): URLs go
    [doc] = step.run([Document(text=page, id="1")])
    assert dclm._url_patterns.cache_info().currsize == 1
    signals, edited = dclm_signals(page)
    assert {k: doc.metadata[k] for k in signals} == signals and "www.example.com" not in edited
