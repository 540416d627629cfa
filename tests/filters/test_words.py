"""The tuned spaCy pipeline (bigger cache, chunks at line breaks, fewer lexeme attributes) gives exactly
the tokens of plain spaCy, the one datatrove's ``split_into_words`` runs."""

from __future__ import annotations

import json
from unittest.mock import patch

import numpy as np
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st

import filters.words as words
from filters.words import WordTokenizer
from tests.support import shared_data

# pieces that exercise affixes, tokenizer exceptions (also ones matched across a space: "EE. UU." is one
# token in Spanish, and in "known' ''word" a match over the space shadows the "''" after it), URLs,
# numbers, and every kind of whitespace run, line breaks among them
PIECES = [
    "known' ''word",
    "EE. UU.",
    "Ee. Uu.",
    "x' 's",
    "word",
    "Mr.",
    "U.S.",
    "don't",
    "it's",
    "''",
    "'",
    '"',
    "(",
    ")",
    ":)",
    "e.g.",
    "a.m.",
    "cannot",
    "gonna",
    "3.5",
    "10km",
    "$5",
    "http://example.com/a?b=c",
    "x@y.org",
    "—",
    "...",
    "!",
    "?",
    "EE.",
    "UU.",
    "co-op",
    "&amp;",
    "#tag",
    "¿Qué",
    "über",
    "Straße",
    "日本語",
    "\u00a0",
]
SEPARATORS = [" ", " ", " ", "", "\n", " \n", "\n\n", "\n \n", "\t", "  ", "\r\n", "\u2028", "\n\t "]
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(SEPARATORS)), max_size=60).map(
    lambda parts: "".join(piece + sep for piece, sep in parts)
)


def _plain(language: str):
    nlp = spacy.blank(language)
    nlp.add_pipe("sentencizer")
    nlp.max_length = 10**8
    return nlp


PLAIN = {"en": _plain("en"), "es": _plain("es")}


def _reference(text: str, language: str = "en") -> list[tuple[int, str, bool, bool]]:
    return [(t.idx, t.text.strip(), t.is_punct, t.is_space) for t in PLAIN[language].make_doc(text)]


def _ours(tokenizer: WordTokenizer, text: str) -> list[tuple[int, str, bool, bool]]:
    with tokenizer.batch():
        tok = tokenizer.tokenize(text)
    return [
        (start, word, kind in (words.PUNCT, words.SENT_END), kind == words.SPACE)
        for start, word, kind in zip(tok.starts, tok.texts, tok.kinds, strict=True)
    ]


def _real_texts() -> list[str]:
    if not shared_data.available():
        return []
    root = shared_data.shared_data_dir()
    out = []
    for set_name in ("html_extraction_aeb", "html_extraction_wcxb"):
        for line in (root / set_name / "ground_truth.jsonl").read_text().splitlines()[::3]:
            out.append(json.loads(line).get("text") or "")
    return [t for t in out if t]


def test_real_documents_tokenize_as_plain_spacy() -> None:
    texts = _real_texts()
    if not texts:
        pytest.skip("shared data not available")
    tokenizer = WordTokenizer("en")
    long_ones = [t for t in texts if len(t) > 3 * words.CHUNK_CHARS and t.count("\n") > 3]
    assert len(long_ones) >= 20  # the chunked path is exercised
    mismatched = [i for i, text in enumerate(texts) if _ours(tokenizer, text) != _reference(text)]
    assert not mismatched, f"{len(mismatched)}/{len(texts)} documents differ, e.g. {texts[mismatched[0]][:200]!r}"


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from([0, 3, 40]), st.sampled_from(["en", "es"]))
def test_random_texts_tokenize_as_plain_spacy(text: str, chunk_chars: int, language: str) -> None:
    """Tiny chunks put a chunk boundary at nearly every line break (Spanish has an exception with a space)."""
    tokenizer = WordTokenizer(language)
    with patch.object(words, "CHUNK_CHARS", chunk_chars):
        assert _ours(tokenizer, text) == _reference(text, language)


def test_an_exception_holding_a_line_break_turns_chunking_off() -> None:
    """Such a special case could match across a chunk boundary (spaCy 3.8 does not match one over a line
    break, but the guard does not rely on that): the document is then tokenized whole, with the same tokens."""
    tokenizer = WordTokenizer("en")
    with tokenizer.batch():
        tokenizer.tokenize("warm up")
    nlp = tokenizer._impl.tokenizer
    assert words._pipeline(tokenizer._impl).chunked
    nlp.tokenizer.add_special_case("a\nb", [{"ORTH": "a\nb"}])
    PLAIN["en"].tokenizer.add_special_case("a\nb", [{"ORTH": "a\nb"}])
    try:
        words._tuned.clear()  # the pipeline is tuned (and checked) again on next use
        assert not words._pipeline(tokenizer._impl).chunked
        text = "x a\nb y\n" * 400
        with patch.object(words, "CHUNK_CHARS", 3):
            assert _ours(tokenizer, text) == _reference(text)
    finally:  # both pipelines without the extra exception again
        PLAIN["en"].tokenizer.rules = {k: v for k, v in PLAIN["en"].tokenizer.rules.items() if k != "a\nb"}
        tokenizer._impl._tokenizer = None


def _exception_pieces() -> list[str]:
    """The English exceptions that spaCy's affix rules split into several tokens, and those tokens:
    the material of document-wide matches, inside a word and across a space."""
    twin = spacy.blank("en")
    twin.tokenizer.rules = {}
    splits = [[t.text for t in twin.make_doc(key)] for key in sorted(PLAIN["en"].tokenizer.rules) if not key.isspace()]
    multi = [split for split in splits if len(split) > 1]
    return sorted({"".join(split) for split in multi} | {token for split in multi for token in split})


EXCEPTION_PIECES = _exception_pieces()
# words of one to three pieces glued together, mostly one space apart
glued = st.lists(
    st.tuples(
        st.lists(st.sampled_from(EXCEPTION_PIECES), min_size=1, max_size=3).map("".join),
        st.sampled_from([" ", " ", " ", "\n"]),
    ),
    max_size=30,
).map(lambda parts: "".join(word + sep for word, sep in parts))


@settings(max_examples=400, deadline=None)
@given(glued)
def test_matches_across_a_space_are_found_and_respliced(text: str) -> None:
    """Exception pieces glued by single spaces: wherever spaCy's document-wide match could cross a
    space (and shadow one inside a word), the stretch is tokenized by spaCy and the tokens stay exact."""
    assert _ours(WordTokenizer("en"), text) == _reference(text)


def test_without_the_resplice_a_shadowed_exception_differs() -> None:
    """The resplice matters: with no boundary taken for risky, "known' ''word" keeps the ``''`` that
    spaCy's match over the space shadows."""
    tokenizer = WordTokenizer("en")
    text = "known' ''word"
    assert _ours(tokenizer, text) == _reference(text)
    memo = words._pipeline(tokenizer._impl).memo
    with patch.object(memo.boundaries, "table", np.zeros_like(memo.boundaries.table)):
        assert _ours(tokenizer, text) != _reference(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "  a",
        "\n",
        "a ",
        "a  ",
        "x\u3000y",
        "\x1c a\x1db",
        "\x85x",
        " \n a b \t",
        "a\u00a0\u00a0b",
        "x" * 5000 + " y",
        "Mr. Smith's  \"quote\" (don't) e.g. U.S.",
        "''",
        "'' ''",
        "known' ''word  known' ''word",
    ],
)
def test_whitespace_spans_at_the_edges(text: str) -> None:
    """Leading, trailing and doubled whitespace of every kind (a span keeps all but one space after a word)."""
    assert _ours(WordTokenizer("en"), text) == _reference(text)


def test_the_memo_starts_afresh_past_the_bound() -> None:
    tokenizer = WordTokenizer("en")
    text = "The committee met on Tuesday; it didn't (yet) decide."
    assert _ours(tokenizer, text) == _reference(text)
    memo = words._pipeline(tokenizer._impl).memo
    with patch.object(words, "MAX_VOCAB_STRINGS", len(memo) - 1), tokenizer.batch():
        assert words._pipeline(tokenizer._impl).memo is not memo
    assert _ours(tokenizer, text) == _reference(text)


def test_a_resplice_stretch_longer_than_spacys_default_max_length() -> None:
    """A stretch handed back to spaCy may be longer than any text spaCy was given before (here one line of
    1.1M characters, every boundary risky): spaCy's length limit is raised for it as for any text."""
    text = "known' ''word " * 80_000
    assert len(text) > 1_000_000
    assert _ours(WordTokenizer("en"), text) == _reference(text)
