"""Signals once, rules after: the same verdicts, reasons and edited text as datatrove's filters."""

from __future__ import annotations

import json

import pytest
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.utils.text import split_into_words

from filters.quality import compute_signals, signal_columns
from filters.words import WordTokenizer, count_sentences
from pipelines.recipe import load_recipe
from tests.support import shared_data

SYNTHETIC = [
    "Short text.",
    "The cat sat on the mat. It was happy to be there with the dog.\n" * 12,
    "# heading\n- item one\n- item two\n- item three\n" * 5,
    "Lorem ipsum dolor sit amet, it is said, and the rest of it with them.\n" * 6,
    "function f() { return 1; } is what the code of the page has to be.\nA second line of text here.\n",
    "Read the [1] article [edit] on the page, and it is good to have the [citation needed] parts.\n" * 8,
    "This site uses cookies to give you the best experience of the day.\nEnable JavaScript to use it all.\n",
    "Wait...\nWhat is it...\nNothing at all...\n" * 10,
    "Numbers 12 34 56 78 90 12 34 56 78 90 and the end of it.\n\n\nAnd another paragraph with the words.",
]


def _corpus() -> list[str]:
    texts = list(SYNTHETIC)
    if shared_data.available():
        root = shared_data.shared_data_dir()
        for set_name in ("html_extraction_aeb", "html_extraction_wcxb", "html_extraction_readability"):
            for line in (root / set_name / "ground_truth.jsonl").read_text().splitlines():
                text = json.loads(line).get("text")
                if text:
                    texts.append(text)
        for line in (root / "cc_web_text_samples").glob("*.jsonl"):
            texts.extend(json.loads(x).get("text", "") for x in line.read_text().splitlines())
    return [t for t in texts if t]


def _datatrove_verdict(text: str) -> tuple[bool, str | None, str]:
    doc = Document(text=text, id="x")
    for step in (
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
    ):
        result = step.filter(doc)
        if result is not True:
            return False, f"{type(step).__name__}:{result[1] if isinstance(result, tuple) else ''}", doc.text
    return True, None, doc.text


CURATE = load_recipe().curate  # the bundled recipe: its thresholds are datatrove's defaults
RULES = list(
    zip(
        ("GopherRepetitionFilter", "GopherQualityFilter", "C4QualityFilter", "FineWebQualityFilter"),
        CURATE.rules.ordered(),
        strict=True,
    )
)


def _our_verdict(text: str, tokenizer: WordTokenizer) -> tuple[bool, str | None, str]:
    with tokenizer.batch():
        signals, edited = compute_signals(text, tokenizer, CURATE.signals)
    for name, rule in RULES:
        verdict = rule.check(signals)
        if verdict is not True:
            return False, f"{name}:{verdict[1]}", text
    return True, None, edited


def test_signal_columns_cover_every_rule_input() -> None:
    tokenizer = WordTokenizer("en")
    with tokenizer.batch():
        signals, _ = compute_signals(SYNTHETIC[1], tokenizer, CURATE.signals)
    assert list(signals) == signal_columns()


def test_verdicts_reasons_and_text_match_datatrove() -> None:
    tokenizer = WordTokenizer("en")
    texts = _corpus()
    mismatches = []
    for i, text in enumerate(texts):
        ours = _our_verdict(text, tokenizer)
        theirs = _datatrove_verdict(text)
        if ours[:2] != theirs[:2] or (ours[0] and ours[2] != theirs[2]):
            mismatches.append((i, ours[:2], theirs[:2], text[:80]))
    assert not mismatches, f"{len(mismatches)}/{len(texts)} differ: {mismatches[:10]}"
    assert len(texts) >= len(SYNTHETIC)


def test_one_tokenization_gives_datatrove_words() -> None:
    tokenizer = WordTokenizer("en")
    for text in _corpus()[:80]:
        with tokenizer.batch():
            assert tokenizer.tokenize(text).words == split_into_words(text, "eng")


@pytest.mark.parametrize(
    "line", ["One. Two! Three?", "No end", "Dr. Smith went home.  Then he slept...", '"Quoted." Next one.']
)
def test_sentence_count_matches_spacy_sentencizer(line: str) -> None:
    from datatrove.utils.text import split_into_sentences

    tokenizer = WordTokenizer("en")
    with tokenizer.batch():
        assert count_sentences(tokenizer.tokenize(line).kinds) == len(split_into_sentences(line, "eng"))


def test_tokenizer_memory_bound_rebuilds_spacy_with_the_same_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """No memory zone (spaCy caches nothing inside one): past the vocabulary bound the pipeline is
    rebuilt between batches, and tokens do not change across the rebuild."""
    import filters.words as words

    tokenizer = WordTokenizer("en")
    with tokenizer.batch():
        before = [tokenizer.tokenize(text) for text in SYNTHETIC]
    first = tokenizer._impl.tokenizer
    assert len(first.vocab.strings) > 50
    monkeypatch.setattr(words, "MAX_VOCAB_STRINGS", 50)
    with tokenizer.batch():
        after = [tokenizer.tokenize(text) for text in SYNTHETIC]
    assert tokenizer._impl.tokenizer is not first
    assert after == before
