"""The curate stage's quality-classifier step: score each document, keep it by threshold.

``quality_score`` (probability of "high quality") is written to every document's metadata, kept or
dropped. Three modes:

- ``threshold=t``: keep documents with score >= t.
- ``top_fraction=x``: keep the top x % -- by the threshold that keeps x % of the calibration set
  stored beside the model (``<model>.json``, written by ``classifiers.train_quality``). A per-task
  streaming step cannot see the global ranking, so the share kept on a crawl is x % only insofar as
  the calibration set resembles it; for an exact global cut, annotate (no threshold) and re-filter.
- neither: annotate only, drop nothing.

The model, its metadata and the threshold are checked in ``__init__`` (and again by ``check()``), so
a missing or unreadable model is a one-line ``QualityModelError`` before any document is read.
"""

from __future__ import annotations

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter

from classifiers.quality_model import QualityModel, QualityModelError

SCORE_KEY = "quality_score"


def resolve_threshold(model: QualityModel, threshold: float | None, top_fraction: float | None) -> float | None:
    """The score threshold the filter applies (None: annotate only)."""
    if threshold is not None and top_fraction is not None:
        raise QualityModelError("quality classifier: set threshold or top_fraction, not both")
    if threshold is not None:
        if not 0 <= threshold <= 1:
            raise QualityModelError(f"quality classifier: threshold must be in [0, 1], got {threshold}")
        return float(threshold)
    if top_fraction is not None:
        return model.threshold_for(top_fraction)
    return None


def check_quality_model(
    model_path: str, threshold: float | None = None, top_fraction: float | None = None
) -> float | None:
    """Load and validate everything the step needs; returns the threshold it will apply."""
    return resolve_threshold(QualityModel.load(model_path), threshold, top_fraction)


class QualityClassifierFilter(BaseFilter):
    """Drop documents whose fastText quality score is below the threshold (reason ``quality_score``)."""

    name = "quality_classifier"

    def __init__(
        self,
        model_path: str,
        threshold: float | None = None,
        top_fraction: float | None = None,
        exclusion_writer: DiskWriter | None = None,
        batch_size: int = 64,
    ):
        super().__init__(exclusion_writer, batch_size=batch_size)
        self.model_path = str(model_path)
        self.requested = {"threshold": threshold, "top_fraction": top_fraction}
        self.model = QualityModel.load(self.model_path)
        self.threshold = resolve_threshold(self.model, threshold, top_fraction)

    def check(self) -> None:
        """Raise ``QualityModelError`` (one line) if the model or its metadata became unusable."""
        self.model = QualityModel.load(self.model_path)
        self.threshold = resolve_threshold(self.model, **self.requested)

    def _decide(self, doc: Document, score: float) -> bool | tuple[bool, str]:
        doc.metadata[SCORE_KEY] = score
        if self.threshold is None or score >= self.threshold:
            return True
        return False, SCORE_KEY

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        return self._decide(doc, self.model.scores([doc.text])[0])

    def filter_batch(self, batch: list[Document]) -> list[bool | tuple[bool, str]]:
        scores = self.model.scores([doc.text for doc in batch])
        return [self._decide(doc, s) for doc, s in zip(batch, scores, strict=True)]
