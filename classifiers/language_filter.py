"""The curate stage's language filter: a datatrove ``BaseFilter`` over ``LanguageIdentifier``."""

from __future__ import annotations

from collections.abc import Sequence

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter

from classifiers.lid import LanguageIdentifier


class FastTextLanguageFilter(BaseFilter):
    """Keep documents whose score for a target language exceeds ``threshold`` (datatrove's rule).

    Writes ``language`` and ``language_score`` (the top label and its score) into the metadata of
    every document, kept or dropped, so the removed output says what language it was. Top-3 labels
    suffice for datatrove's rule: with a threshold of at least 0.5 only the top label can pass it.
    ``fast=False`` predicts with fastText itself instead of ``classifiers.ft_predict``.
    """

    name = "language"

    def __init__(
        self,
        languages: Sequence[str] | None = ("en",),
        threshold: float = 0.65,
        model_path: str | None = None,
        exclusion_writer: DiskWriter | None = None,
        batch_size: int = 256,
        fast: bool = True,
    ):
        super().__init__(exclusion_writer, batch_size=batch_size)
        self.languages = tuple(languages) if languages else None
        self.threshold = threshold
        self.identifier = LanguageIdentifier(model_path, k=max(3, len(self.languages or ())), fast=fast)

    def _decide(self, doc: Document, prediction) -> bool | tuple[bool, str]:
        label, score = prediction.best
        doc.metadata["language"] = label
        doc.metadata["language_score"] = score
        if self.languages is None:
            return score > self.threshold or (False, "language_score")
        if any(prediction.score_of(lang) > self.threshold for lang in self.languages):
            return True
        return False, "language" if label not in self.languages else "language_score"

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self._decide(doc, self.identifier.predict_one(doc.text))

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        predictions = self.identifier.predict([doc.text for doc in batch])
        return [self._decide(doc, p) for doc, p in zip(batch, predictions, strict=True)]
