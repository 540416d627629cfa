"""Language ID: the curate stage's filter against datatrove's, its fast path against fastText's, and
the measured evaluation on lingua's labelled sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datatrove.data import Document

from classifiers import lid_eval
from classifiers.language_filter import FastTextLanguageFilter
from classifiers.lid import LanguageIdentifier
from classifiers.lid_data import load_labelled, map_languages, paragraphs
from tests.support import shared_data

FALLBACK_TEXTS = [
    "The committee will publish its report on the state of the harbour next spring.",
    "Der Ausschuss wird seinen Bericht über den Zustand des Hafens im Frühjahr veröffentlichen.",
    "Le comité publiera son rapport sur l'état du port au printemps prochain.",
    "Комитет опубликует свой доклад о состоянии гавани следующей весной.",
    "委员会将于明年春天发布关于港口状况的报告。",
    "short",
    "",
]


def real_texts() -> list[str]:
    if not shared_data.available():
        return FALLBACK_TEXTS
    items = load_labelled(shared_data.shared_data_dir() / "langid_lingua_sentences")
    docs = [row["text"] for name in shared_data.EXTRACTION_SETS for row in shared_data.ground_truth(name)]
    return FALLBACK_TEXTS + [t for t, _ in items[::25]] + [t for t in docs if t]


def run_filter(step, texts: list[str]) -> tuple[list[Document], list[bool]]:
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    if hasattr(step, "filter_batch") and getattr(step, "batch_size", 1) > 1:
        verdicts = []
        for start in range(0, len(docs), step.batch_size):
            verdicts += step.filter_batch(docs[start : start + step.batch_size])
    else:
        verdicts = [step.filter(d) for d in docs]
    return docs, [v[0] if isinstance(v, tuple) else bool(v) for v in verdicts]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return real_texts()


def test_language_filter_agrees_with_datatrove(texts: list[str]) -> None:
    from tests.support.datatrove_reference import reference_language_filter

    ref_docs, ref_kept = run_filter(reference_language_filter(["en"]), texts)
    for fast in (True, False):
        docs, kept = run_filter(FastTextLanguageFilter(languages=["en"], fast=fast), texts)
        assert kept == ref_kept
        assert [d.metadata["language"] for d in docs] == [d.metadata["language"] for d in ref_docs]
        for a, b in zip(docs, ref_docs, strict=True):
            assert a.metadata["language_score"] == pytest.approx(b.metadata["language_score"], abs=1e-4)


def test_batch_and_single_predictions_agree(texts: list[str]) -> None:
    identifier = LanguageIdentifier()
    batch = identifier.predict(texts[:200])
    assert [identifier.predict_one(t).labels for t in texts[:200]] == [p.labels for p in batch]


def test_missing_model_fails_at_check(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        LanguageIdentifier(tmp_path / "missing.bin").check()
    assert "\n" not in str(err.value)


def test_paragraphs_join_five_sentences_of_one_language() -> None:
    items = [(f"s{i}", "en") for i in range(11)] + [(f"d{i}", "de") for i in range(5)]
    out = paragraphs(items)
    assert out == [("s0 s1 s2 s3 s4", "en"), ("s5 s6 s7 s8 s9", "en"), ("d0 d1 d2 d3 d4", "de")]


def test_lingua_codes_map_to_ft176_labels() -> None:
    labels = [p.removeprefix("__label__") for p in LanguageIdentifier().model.get_labels()]
    mapping, missing = map_languages(["en", "nb", "zu", "tl"], labels)
    assert mapping == {"en": "en", "nb": "no", "tl": "tl"}
    assert missing == ["zu"]


def test_lid_eval_ours_at_least_raw(tmp_path: Path) -> None:
    folder = shared_data.require() / "langid_lingua_sentences"
    out = tmp_path / "lid.json"
    assert lid_eval.main(["--data", str(folder), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for level in ("sentence", "paragraph"):
        systems = report[level]["systems"]
        assert systems["ours"]["accuracy"] >= systems["raw"]["accuracy"]
        assert systems["ours"]["macro_f1"] >= systems["raw"]["macro_f1"]
        assert report[level]["agreement"] > 0.999
        unsupported = set(report[level]["unsupported"])
        assert unsupported and not unsupported & set(systems["ours"]["per_language"])
    sentences = report["sentence"]["systems"]["ours"]
    assert sentences["items"] + sum(u["items"] for u in report["sentence"]["unsupported"].values()) == len(
        load_labelled(folder)
    )
    assert report["paragraph"]["systems"]["ours"]["accuracy"] > sentences["accuracy"]
