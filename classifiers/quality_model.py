"""A trained fastText quality classifier: load it, check it, score texts, resolve a top-fraction threshold.

Training (``classifiers.train_quality``) writes the model and, beside it, ``<model>.json``: labels,
parameters, held-out figures and the score quantiles of a calibration set. A streaming, per-task
filter cannot rank all documents of a crawl, so "keep the top x %" becomes the score threshold
that keeps x % of the calibration documents, read from that file before any work starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from classifiers.ft_format import FastTextFormatError, read_fasttext
from classifiers.lid import LABEL_PREFIX, load_fasttext
from classifiers.metrics import threshold_from_quantiles

POSITIVE = "hq"
NEGATIVE = "lq"
SIDECAR_KIND = "cc2model.quality_classifier"


class QualityModelError(ValueError):
    """A quality model that cannot be used; one line naming the file."""


def sidecar_path(model_path: str | Path) -> Path:
    return Path(f"{model_path}.json")


def fasttext_line(text: str) -> str:
    """The one-line form fastText sees, identical at training and scoring: whitespace runs become one
    space and ``__label__`` (which would inject a label) is removed."""
    return " ".join(text.replace(LABEL_PREFIX, " ").split())


@dataclass
class QualityModel:
    """Path, positive label and sidecar metadata; the fastText object is loaded (once) on use."""

    path: str
    positive_label: str = POSITIVE
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> QualityModel:
        """Validate the file (structure, supervised, has the positive label) and read the sidecar."""
        path = str(path)
        if not Path(path).is_file():
            raise QualityModelError(f"quality model not found: {path}")
        try:
            parsed = read_fasttext(path)  # bounds-checked parse: a truncated file fails here, not in C++
        except FastTextFormatError as err:
            raise QualityModelError(f"quality model unreadable: {err}") from None
        if parsed.args.model != "supervised":
            raise QualityModelError(f"quality model unusable: {path} is a {parsed.args.model} model")
        meta = read_sidecar(path)
        positive = meta.get("positive_label", POSITIVE)
        if positive not in parsed.labels:
            raise QualityModelError(
                f"quality model unusable: {path} has labels {parsed.labels}, not the positive label {positive!r}"
            )
        try:
            load_fasttext(path)
        except (OSError, ValueError, RuntimeError) as err:
            raise QualityModelError(f"quality model unreadable: {path}: {err}") from None
        return cls(path, positive, meta)

    def scores(self, texts: list[str]) -> list[float]:
        """Probability of the positive label per text, in [0, 1]."""
        if not texts:
            return []
        labels, probs = load_fasttext(self.path).predict([fasttext_line(t) for t in texts], k=-1)
        want = LABEL_PREFIX + self.positive_label
        out = []
        for lab, prob in zip(labels, probs, strict=True):
            score = next((float(p) for lb, p in zip(lab, prob, strict=True) if lb == want), 0.0)
            out.append(min(max(score, 0.0), 1.0))  # fastText adds 1e-5 to every probability
        return out

    def threshold_for(self, top_fraction: float) -> float:
        """Score threshold that keeps ``top_fraction`` of the calibration documents."""
        if not 0 < top_fraction <= 1:
            raise QualityModelError(f"top_fraction must be in (0, 1], got {top_fraction}")
        calibration = self.meta.get("calibration") or {}
        exact = calibration.get("top_fraction_thresholds", {})
        key = _fraction_key(top_fraction)
        if key in exact:
            return float(exact[key])
        qs = calibration.get("quantiles")
        if not qs:
            raise QualityModelError(
                f"top_fraction needs score quantiles in {sidecar_path(self.path)} "
                "(written by classifiers.train_quality); give a threshold instead"
            )
        return threshold_from_quantiles(qs, top_fraction)


def _fraction_key(fraction: float) -> str:
    return f"{fraction:g}"


def read_sidecar(path: str | Path) -> dict[str, Any]:
    """The training metadata beside the model, or {} when there is none."""
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    try:
        meta = json.loads(side.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise QualityModelError(f"quality model metadata unreadable: {side}: {err}") from None
    if not isinstance(meta, dict) or meta.get("kind") != SIDECAR_KIND:
        raise QualityModelError(f"quality model metadata unreadable: {side} is not a {SIDECAR_KIND} file")
    return meta


def write_sidecar(path: str | Path, meta: dict[str, Any]) -> Path:
    side = sidecar_path(path)
    side.write_text(json.dumps({"kind": SIDECAR_KIND, **meta}, indent=2))
    return side
