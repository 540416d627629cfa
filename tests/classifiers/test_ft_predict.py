"""The numpy fastText predictor against fastText itself: same n-gram rows, same labels, same scores.

The bundled ``lid.176.ftz`` (hierarchical softmax, pruned and product-quantized input) is always
available; small models trained here cover softmax, dense ``.bin`` files and quantized outputs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from classifiers.ft_format import FastTextFormatError, read_fasttext
from classifiers.ft_predict import MAX_BATCH_CELLS, PREDICT_CHUNK, SPLIT_DIFFERS, UnigramPredictor, supports
from classifiers.ft_subwords import EOS, subword_rows
from classifiers.ft_train import train_supervised
from classifiers.lid import bundled_ft176_path, load_fasttext
from classifiers.lid_data import load_labelled
from tests.support import shared_data

EDGE_TEXTS = [
    "",
    " ",
    "\t\v\f\r",
    "plain English words in a short sentence.",
    "a line with an end token </s> and words after it",
    "</s>",
    "__label__en should not count as a word __label__",
    "nul\x00separates and \x1c\x1f do not",
    "no-break\u00a0space and ideographic\u3000space",
    "emoji 🙂🙂🙂 and accents éèêë ÅÄÖ ñ",
    "ß" * 50 + " " + "x" * 300,
    "Mixed 中文 русский العربية हिन्दी 日本語 한국어",
    "line one\nline two\n\nline four",
]


def ft_predictions(model, texts: list[str], k: int) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
    labels, probs = model.predict([t.replace("\n", " ") for t in texts], k=k)
    return [
        (tuple(x[len("__label__") :] for x in lab), tuple(float(p) for p in pr))
        for lab, pr in zip(labels, probs, strict=True)
    ]


def assert_same(reference, ours, tol: float = 1e-4, tie: float = 2e-5) -> None:
    """Same labels in the same order and probabilities within ``tol``, down to the first near-tie
    (two probabilities closer than ``tie``: float rounding may order them either way) or to the
    probabilities at fastText's 1e-5 floor."""
    assert len(reference) == len(ours)
    for (ref_labels, ref_probs), (labels, probs) in zip(reference, ours, strict=True):
        assert bool(ref_labels) == bool(labels)
        for i, (label, p) in enumerate(zip(ref_labels, ref_probs, strict=False)):
            if p < 1e-3 or i >= len(labels):
                break
            if i + 1 < len(ref_probs) and ref_probs[i] - ref_probs[i + 1] < tie:
                assert probs[i] == pytest.approx(p, abs=tol)
                break
            assert labels[i] == label
            assert probs[i] == pytest.approx(p, abs=tol)


def train_model(tmp: Path, loss: str, word_ngrams: int = 1, n: int = 3000, quantize: dict | None = None) -> Path:
    folder = shared_data.require() / "langid_lingua_sentences"
    rows = [(t, lang) for t, lang in load_labelled(folder) if lang in ("en", "de", "fr", "nl", "ru")]
    train = tmp / f"train-{loss}-{word_ngrams}.txt"
    train.write_text("\n".join(f"__label__{lang} {t}" for t, lang in rows[:n]) + "\n")
    params = dict(
        input=str(train), dim=8, epoch=3, minn=2, maxn=4, wordNgrams=word_ngrams, bucket=20_000, loss=loss,
        thread=1, seed=1, verbose=0, minCount=2,
    )  # fmt: skip
    path = tmp / f"model-{loss}-{word_ngrams}{'.ftz' if quantize else '.bin'}"
    train_supervised(params, path, quantize and {"input": str(train), **quantize})
    return path


@pytest.fixture(scope="module")
def sample_texts() -> list[str]:
    if not shared_data.available():
        return EDGE_TEXTS
    items = load_labelled(shared_data.shared_data_dir() / "langid_lingua_sentences")
    docs = [row["text"] for row in shared_data.ground_truth("html_extraction_aeb") if row.get("text")]
    return EDGE_TEXTS + [t for t, _ in items[::20]] + docs


def test_ft176_matches_fasttext(sample_texts: list[str]) -> None:
    path = str(bundled_ft176_path())
    model = UnigramPredictor(read_fasttext(path))
    for k in (1, 3, -1):
        assert_same(ft_predictions(load_fasttext(path), sample_texts, k), model.predict(sample_texts, k=k))


def test_subword_rows_equal_fasttext_ids(sample_texts: list[str], tmp_path: Path) -> None:
    paths = [str(bundled_ft176_path())]
    if shared_data.available():
        paths.append(str(train_model(tmp_path, "softmax")))  # a dense, unpruned .bin
    words = sorted({w for t in sample_texts for w in t.split()} | {"</s>", "a", "é", "🙂"})
    words = [w for w in words if not w.startswith("__label__")][:: max(1, len(words) // 5000)]
    words += ["<", ">", "<>", "x>y", "a<b", "é>"]  # brackets inside words: the ASCII hashing path
    # (labels never reach subword_rows; 5000 words of all scripts suffice)
    for path in paths:
        parsed = read_fasttext(path)
        vocab = {w: i for i, w in enumerate(parsed.words)}
        word_idx, rows = subword_rows(parsed, words, vocab)
        order = np.argsort(word_idx, kind="stable")
        per_word = np.split(rows[order], np.searchsorted(word_idx[order], np.arange(1, len(words))))
        ft = load_fasttext(path)
        for word, ours in zip(words, per_word, strict=True):
            assert sorted(ours.tolist()) == sorted(ft.get_subwords(word)[1].tolist()), word


@pytest.mark.parametrize("loss", ["softmax", "hs"])
def test_trained_models_match_fasttext(loss: str, tmp_path: Path, sample_texts: list[str]) -> None:
    dense = train_model(tmp_path, loss)
    quantized = train_model(tmp_path, loss, quantize={"qnorm": True, "cutoff": 2000, "retrain": False})
    for path in (dense, quantized):
        parsed = read_fasttext(path)
        assert supports(parsed) is None
        reference = ft_predictions(load_fasttext(str(path)), sample_texts, 3)
        assert_same(reference, UnigramPredictor(parsed).predict(sample_texts, k=3))


def test_quantized_output_matrix_matches_fasttext(tmp_path: Path, sample_texts: list[str]) -> None:
    """fastText quantizes the output only with 256+ labels: 300 made-up labels over real sentences."""
    folder = shared_data.require() / "langid_lingua_sentences"
    rows = load_labelled(folder)[::5]
    train = tmp_path / "many-labels.txt"
    train.write_text("\n".join(f"__label__c{i % 300} {t}" for i, (t, _) in enumerate(rows)) + "\n")
    path = tmp_path / "many-labels.ftz"
    params = dict(input=str(train), dim=8, epoch=1, minn=2, maxn=3, bucket=20_000, thread=1, seed=1, verbose=0)
    train_supervised(params, path, {"input": str(train), "qnorm": True, "qout": True, "cutoff": 5000})
    assert_same(
        ft_predictions(load_fasttext(str(path)), sample_texts, 3),
        UnigramPredictor(read_fasttext(path)).predict(sample_texts, k=3),
    )


def test_word_ngram_models_are_left_to_fasttext(tmp_path: Path) -> None:
    from classifiers.lid import LanguageIdentifier

    path = train_model(tmp_path, "softmax", word_ngrams=2)
    assert "word n-grams" in supports(read_fasttext(path))
    identifier = LanguageIdentifier(path)
    assert identifier.predictor is None
    texts = ["this is an English sentence", "dies ist ein deutscher Satz"]
    expected = ft_predictions(load_fasttext(str(path)), texts, 3)
    assert [(p.labels, p.scores) for p in identifier.predict(texts)] == expected


def test_tiny_cache_gives_the_same_predictions(sample_texts: list[str]) -> None:
    parsed = read_fasttext(bundled_ft176_path())
    small = UnigramPredictor(parsed, max_cache_bytes=1)  # forces a reset in every batch
    big = UnigramPredictor(parsed)
    for start in range(0, len(sample_texts), 16):
        batch = sample_texts[start : start + 16]
        a, b = small.predict(batch, k=3), big.predict(batch, k=3)
        assert [x[0] for x in a] == [x[0] for x in b]
        assert np.allclose([x[1][0] for x in a if x[1]], [x[1][0] for x in b if x[1]], atol=1e-6)


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_the_output_layer_runs_blas_on_one_thread_with_the_same_scores(sample_texts: list[str]) -> None:
    """OpenBLAS's idle workers spin after each multi-threaded product, CPU time of the task: ``predict``
    runs the output layer on one BLAS thread, gives the setting back, and its scores are the very bits of
    a multi-threaded product."""
    during: list[list[int]] = []

    class Recording(UnigramPredictor):
        def log_probs(self, hidden: np.ndarray) -> np.ndarray:
            during.append(blas_threads())
            return super().log_probs(hidden)

    model = Recording(read_fasttext(bundled_ft176_path()))
    texts = (sample_texts * (PREDICT_CHUNK // len(sample_texts) + 1))[:PREDICT_CHUNK]
    with threadpool_limits(limits=2, user_api="blas"):
        ours = model.predict(texts, k=-1)
        assert during and all(threads == [1] * len(threads) for threads in during)
        assert blas_threads() == [2] * len(blas_threads())
        hidden, _ = model.hidden(texts)
        multi = UnigramPredictor.log_probs(model, hidden)  # two BLAS threads
    with threadpool_limits(limits=1, user_api="blas"):
        single = UnigramPredictor.log_probs(model, hidden)
    assert np.array_equal(multi, single)
    assert ours == UnigramPredictor(read_fasttext(bundled_ft176_path())).predict(texts, k=-1)


def test_split_differs_lists_every_disagreeing_character() -> None:
    fasttext_space = set(" \n\r\t\v\f\x00")
    disagree = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace() != (chr(c) in fasttext_space)}
    assert disagree == {c for c in map(chr, range(sys.maxunicode + 1)) if SPLIT_DIFFERS.match(c)}


def test_unreadable_files_raise_one_line_errors(tmp_path: Path) -> None:
    good = bundled_ft176_path().read_bytes()
    cases = {"empty": b"", "garbage": b"not a model at all" * 10, "truncated": good[: len(good) // 2]}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(FastTextFormatError) as err:
            read_fasttext(path)
        assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_hidden_sums_through_reused_buffers_equal_a_fresh_gather(sample_texts: list[str]) -> None:
    """Tokens split at fastText's separators (no regex), and each text's rows summed as one float32 gather reduced
    with ``dtype=float64`` sums them, bit for bit: the gather buffers are reused from chunk to chunk, widened to
    float64 before the sum, and grow for a text over one chunk."""
    model = UnigramPredictor(read_fasttext(bundled_ft176_path()))
    dim = model.model.args.dim
    plain = [t for t in sample_texts if EOS not in t and "__label__" not in t]
    huge = " ".join(plain * (MAX_BATCH_CELLS // dim // len(" ".join(plain).split()) + 2))
    texts = [*plain, huge, *plain[::-1]]
    hidden, counts = model.hidden(texts)
    assert len(model._gathered) > MAX_BATCH_CELLS // dim  # the huge text took a larger buffer
    for text, row, n in zip(texts, hidden, counts, strict=True):
        tokens = [*re.findall(r"[^ \n\r\t\v\f\x00]+", text), EOS]
        assert UnigramPredictor.tokens(text) == tokens
        ids = [model._index[t] for t in tokens]
        total = np.add.reduceat(model._sums[ids], [0], axis=0, dtype=np.float64)[0]
        assert n == model._counts[ids].sum()
        assert np.array_equal(row, total / n if n else np.zeros(dim))


def test_hidden_sums_of_transposed_rows_equal_the_row_major_reduceat_bit_for_bit(sample_texts: list[str]) -> None:
    """The rows are summed dimension by dimension (transposed, contiguous): the same bits as ``reduceat`` over the
    row-major widened rows, which the scores were computed from before. Row sums of random magnitudes, so that the
    order of the additions shows in the last bits, and texts from 1 token to several chunks' worth."""
    model = UnigramPredictor(read_fasttext(bundled_ft176_path()))
    dim = model.model.args.dim
    words = np.array(sorted(set(" ".join(sample_texts).split())))
    rng = np.random.default_rng(7)
    texts = [" ".join(rng.choice(words, size=n)) for n in (0, 1, 7, 8, 9, 127, 128, 129, 1000, 8191, 8193, 70_000)]
    texts += [" ".join(rng.choice(words, size=rng.integers(1, 300))) for _ in range(200)]
    model.hidden(texts)  # every word cached
    used = len(model._index)
    model._sums[:used] = (rng.standard_normal((used, dim)) * 10.0 ** rng.integers(-4, 4, (used, 1))).astype(np.float32)
    hidden, counts = model.hidden(texts)
    for text, row, n in zip(texts, hidden, counts, strict=True):
        ids = [model._index[t] for t in UnigramPredictor.tokens(text)]
        total = np.add.reduceat(model._sums[ids].astype(np.float64), [0], axis=0)[0]
        assert np.array_equal(row, total / n)
