"""Normalisation, word splitting and shingles against datatrove's simplify_text + spaCy (the oracle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from datatrove.pipeline.dedup.minhash import MinhashDedupSignature
from datatrove.utils.text import simplify_text
from datatrove.utils.word_tokenizers import load_word_tokenizer

from dedup.evaluation import paragraph_chunks, real_texts
from dedup.shingles import batch_shingles, text_shingles
from dedup.text import SpacyCompatibleSplitter, normalized_words
from tests.support.shared_data import shared_data_dir


def shared_data() -> Path:
    return shared_data_dir()


TRICKY = [
    "Hello, World!  It's 3.14 — or 1,000,000.5 ‘quoted’ words…",
    "Ça coûte 12€ — naïve café, São Paulo, Ærøskøbing; Straße",
    "I cannot believe you don't know; im sure id go, gonna wed",
    "Sizes: 5GB, 10oz, 3mm, 2ft, 20°C, 100%, $5, £3, ¥4, 7km/h",
    "tabs\tand\nnew\r\nlines\u00a0nbsp\u2003em-space \x00\x1f control",
    "Greek question mark\u037e and a lone combining accent \u0301 here",
    "中文没有空格的句子，以及日本語の文章。한국어 문장도 있습니다",
    "emoji 🙂 and flags 🇪🇬 and ™ ® © symbols, URL https://a.b/c?d=1",
    "Devanagari हिन्दी भाषा, Arabic العَرَبِيَّة, Hebrew עִבְרִית",
    "numbers ٣٤٥ and १२३ and 12,5 and 3.0.1",
    "",
    "...!!!",
]


def _as_str(words: list) -> list[str]:
    return [w.decode() if isinstance(w, bytes) else w for w in words]


@pytest.mark.parametrize("text", TRICKY)
def test_normalized_words_equal_simplify_text(text):
    assert _as_str(normalized_words(text)) == simplify_text(text).split()


@pytest.mark.parametrize("text", TRICKY)
def test_spacy_split_equals_datatrove_tokenizer(text):
    expected = load_word_tokenizer("en").word_tokenize(simplify_text(text))
    assert _as_str(SpacyCompatibleSplitter()(text)) == expected


@pytest.mark.parametrize("mode", ["words", "text"])
def test_batches_and_short_documents(mode):
    docs = [["a", "b"], [], [b"a", b"b"], "one two three four five six".split(), ["a", "b", "c"]]
    hashes, offsets, positions = batch_shingles(docs, 5, mode)
    assert positions.tolist() == [0, 2, 3, 4] and np.diff(offsets).tolist() == [1, 1, 2, 1]
    assert hashes[0] == hashes[1]  # str and bytes words hash alike
    assert len(set(hashes.tolist())) == 4  # "a b" != "a b c" != the 5-grams
    alone = [batch_shingles([d], 5, mode)[0] for d in docs if d]
    assert np.array_equal(np.concatenate(alone), hashes)


def test_both_hashings_give_the_same_sets():
    docs = [
        "the cat sat on the mat and the cat sat on the hat again".split(),
        "the cat sat on the mat".split(),
    ]
    text, _, _ = batch_shingles(docs, 3, "text")
    fast, _, _ = batch_shingles(docs, 3, "words")
    assert len(text) == len(fast)
    # positions with equal n-grams get equal hashes in both schemes, and only those
    assert np.array_equal(text[:, None] == text[None, :], fast[:, None] == fast[None, :])


@pytest.fixture(scope="module")
def real_docs() -> list[str]:
    data = shared_data()
    if not data.exists():
        pytest.skip(f"shared data not found at {data}")
    docs = paragraph_chunks(real_texts(data), 300)
    return docs[::6]  # ~370 documents of every source keep the test fast


def test_spacy_split_agrees_with_datatrove_on_real_text(real_docs):
    tokenizer = load_word_tokenizer("en")
    splitter = SpacyCompatibleSplitter()
    agree = sum(_as_str(splitter(d)) == tokenizer.word_tokenize(simplify_text(d)) for d in real_docs)
    print(f"identical word lists: {agree}/{len(real_docs)}")
    assert agree / len(real_docs) >= 0.995


def test_text_shingles_are_datatrove_shingles(real_docs, tmp_path):
    oracle = MinhashDedupSignature(output_folder=str(tmp_path))
    splitter = SpacyCompatibleSplitter()
    mismatches = [
        i
        for i, d in enumerate(real_docs[:150])
        if not np.array_equal(text_shingles(splitter(d), 5), oracle.get_shingles(d).ravel())
    ]
    assert not mismatches
