"""Recipe -> the curate stage's datatrove pipeline (FineWeb's order), one task per WARC shard."""

from __future__ import annotations

from pathlib import Path

from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.formatters import PIIFormatter

from classifiers.language_filter import FastTextLanguageFilter
from curate.extract import MainTextExtractor
from curate.parquet import AtomicParquetWriter, document_schema
from curate.warc import RobustWarcReader
from filters.quality_steps import C4RuleFilter, QualitySignals, RuleFilter
from filters.signals import signal_names
from filters.url import OfflineURLFilter
from pipelines.layout import RunLayout
from pipelines.recipe import Recipe
from pipelines.sources import ResolvedSource

REMOVED_STEPS = (
    "url",
    "extraction",
    "language",
    "gopher_repetition",
    "gopher_quality",
    "c4_quality",
    "fineweb_quality",
    "quality_classifier",
)


def curated_schema(recipe: Recipe):
    return document_schema(signal_names(recipe.signals) + ["quality_score"])


def build_curate_pipeline(
    recipe: Recipe, source: ResolvedSource, layout: RunLayout, paths_file: Path
) -> list[PipelineStep]:
    """Read -> URL filter -> extract -> language -> signals -> rules -> [classifier] -> PII -> write."""
    schema = curated_schema(recipe)

    def removed(step: str, filename: str = "{rank:05d}.parquet") -> AtomicParquetWriter:
        return AtomicParquetWriter(str(layout.removed(step)), schema, filename=filename)

    languages = recipe.language.languages
    steps: list[PipelineStep] = [
        RobustWarcReader(
            source.base, paths_file=str(paths_file), dump=source.dump, max_html_bytes=recipe.extraction.max_html_bytes
        ),
    ]
    if recipe.url_filter.enabled:
        steps.append(OfflineURLFilter(exclusion_writer=removed("url")))
    extraction = recipe.extraction
    steps.append(
        MainTextExtractor(
            favour_precision=extraction.favour_precision,
            deduplicate=extraction.deduplicate,
            timeout=extraction.timeout,
            max_html_bytes=extraction.max_html_bytes,
            precheck_languages=languages if extraction.precheck.enabled else None,
            precheck_threshold=extraction.precheck.threshold,
            lid_model_path=recipe.language.model,
            exclusion_writer=removed("extraction"),
            precheck_writer=removed("language", "{rank:05d}-precheck.parquet"),
        )
    )
    steps.append(
        FastTextLanguageFilter(
            languages=languages,
            threshold=recipe.language.threshold,
            model_path=recipe.language.model,
            exclusion_writer=removed("language"),
        )
    )
    steps.append(QualitySignals(recipe.signals, default_language=languages[0] if languages else "en"))
    rules = recipe.rules
    steps.append(RuleFilter(rules.gopher_repetition, exclusion_writer=removed("gopher_repetition")))
    steps.append(RuleFilter(rules.gopher_quality, exclusion_writer=removed("gopher_quality")))
    steps.append(C4RuleFilter(rules.c4_quality, recipe.signals, exclusion_writer=removed("c4_quality")))
    steps.append(RuleFilter(rules.fineweb_quality, exclusion_writer=removed("fineweb_quality")))
    steps.extend(quality_classifier_steps(recipe, removed))
    if recipe.pii.emails or recipe.pii.ips:
        steps.append(PIIFormatter(remove_emails=recipe.pii.emails, remove_ips=recipe.pii.ips))
    steps.append(AtomicParquetWriter(str(layout.curated), schema))
    return steps


def quality_classifier_steps(recipe: Recipe, removed) -> list[PipelineStep]:
    """The optional fastText quality classifier (its own issue); nothing when no model is set."""
    if not recipe.quality_classifier.model:
        return []
    try:
        from classifiers.quality_filter import QualityClassifierFilter
    except ImportError as err:
        raise RuntimeError(
            f"quality_classifier.model is set but the classifier step is unavailable: {err}"
        ) from None
    qc = recipe.quality_classifier
    return [
        QualityClassifierFilter(
            qc.model,
            threshold=qc.threshold,
            top_fraction=qc.top_fraction,
            exclusion_writer=removed("quality_classifier"),
        )
    ]
