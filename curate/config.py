"""The curate stage's configuration: one typed section per step, validated before any work starts.

The values live in the recipe (``pipelines/recipes/fineweb.yaml``, each with its source); this module
names them, types them and checks what types cannot say (ranges, files that must exist, models that
must load). Every error is one line (``ConfigError``) that names the file and the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.cli import integer, real
from common.config import ConfigError, from_mapping
from filters.decontamination import DecontaminationConfig
from filters.quality import HEURISTICS, Rules, SignalOptions

PAGE_SECONDS = real(0, 3600, open_low=True)  # a time limit for one page or document: an hour
EXTRACTORS = ("trafilatura", "resiliparse")  # curate/extract.py, curate/extract_resiliparse.py
WARC_LIBRARIES = ("warcio", "fastwarc")  # curate/warc.py, curate/warc_fastwarc.py


@dataclass(frozen=True)
class ReaderConfig:
    library: str  # warcio (RobustWarcReader) or fastwarc (FastWarcReader): the same documents on sound files


@dataclass(frozen=True)
class UrlFilterConfig:
    enabled: bool


@dataclass(frozen=True)
class PrecheckConfig:
    enabled: bool
    threshold: float


@dataclass(frozen=True)
class ExtractionConfig:
    extractor: str  # trafilatura or resiliparse, behind the same step contract
    main_content: bool  # resiliparse only: its main-content heuristic (DCLM's setting)
    favour_precision: bool  # trafilatura only
    deduplicate: bool  # trafilatura only
    timeout: float
    max_html_bytes: int
    precheck: PrecheckConfig


@dataclass(frozen=True)
class LanguageConfig:
    languages: tuple[str, ...]
    threshold: float
    model: str | None


@dataclass(frozen=True)
class QualityClassifierConfig:
    model: str | None
    threshold: float | None
    top_fraction: float | None


@dataclass(frozen=True)
class PiiConfig:
    emails: bool
    ips: bool


@dataclass(frozen=True)
class CurateConfig:
    """Every section of the recipe the curate stage reads, in the order its steps run."""

    reader: ReaderConfig
    url_filter: UrlFilterConfig
    extraction: ExtractionConfig
    language: LanguageConfig
    signals: SignalOptions
    rules: Rules
    quality_classifier: QualityClassifierConfig
    pii: PiiConfig
    decontamination: DecontaminationConfig

    @classmethod
    def sections(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str) -> CurateConfig:
        try:
            config = from_mapping(cls, data, where)
        except ValueError as err:  # a section's own check (DecontaminationConfig.__post_init__)
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"{where}: {err}") from None
        config.validate(where)
        # absolute, so that a worker in another directory (a Ray node) reads the same files
        eval_sets = tuple(str(Path(p).resolve()) for p in config.decontamination.eval_sets)
        return dataclasses.replace(
            config, decontamination=dataclasses.replace(config.decontamination, eval_sets=eval_sets)
        )

    def validate(self, where: str) -> None:
        """Checks that need more than types: ranges and files that must exist."""
        if not 0 <= self.language.threshold <= 1:
            raise ConfigError(f"{where}: language.threshold must be in [0, 1]")
        if self.language.threshold < 0.5:
            raise ConfigError(f"{where}: language.threshold below 0.5 is ambiguous (two languages could pass)")
        for label, value, bounded in (  # a day-long page timeout or a 2**64-byte page cap is no limit at all
            ("extraction.timeout", self.extraction.timeout, PAGE_SECONDS),
            ("signals.timeout", self.signals.timeout, PAGE_SECONDS),
            ("extraction.max_html_bytes", self.extraction.max_html_bytes, integer(1, 1 << 31)),  # CC cuts at 1 MiB
        ):
            try:
                bounded.check(value, label)
            except ValueError as err:
                raise ConfigError(f"{where}: {err}") from None
        if not 0 <= self.extraction.precheck.threshold <= 1:
            raise ConfigError(f"{where}: extraction.precheck.threshold must be in [0, 1]")
        if self.signals.heuristics not in HEURISTICS:
            raise ConfigError(f"{where}: signals.heuristics must be one of {', '.join(HEURISTICS)}")
        c4, fineweb = self.signals.c4, self.signals.fineweb
        for label, value, low in (
            ("signals.c4.max_word_length", c4.max_word_length, 1),
            ("signals.c4.min_words_per_line", c4.min_words_per_line, 0),
            ("signals.fineweb.short_line_length", fineweb.short_line_length, 0),
        ):
            if value < low:
                raise ConfigError(f"{where}: {label} must be >= {low}, got {value}")
        qc = self.quality_classifier
        for label, value in (("threshold", qc.threshold), ("top_fraction", qc.top_fraction)):
            if value is not None and not 0 <= value <= 1:
                raise ConfigError(f"{where}: quality_classifier.{label} must be in [0, 1], got {value}")
        for label, value, known in (
            ("extraction.extractor", self.extraction.extractor, EXTRACTORS),
            ("reader.library", self.reader.library, WARC_LIBRARIES),
        ):
            if value not in known:
                raise ConfigError(f"{where}: {label} must be one of {', '.join(known)}, got {value!r}")
        for label, model in (
            ("language.model", self.language.model),
            ("quality_classifier.model", self.quality_classifier.model),
        ):
            if model and not Path(model).is_file():
                raise ConfigError(f"{where}: {label} not found: {model}")
        check_eval_sets(self.decontamination, where)

    def check_models(self) -> None:
        """Load the models now: a missing or unreadable one, or a target language the language model
        never predicts (``eng`` for ft176's ``en``: every document would drop), is an error before any
        work starts."""
        from classifiers.lid import LanguageCodeError, LanguageIdentifier, check_languages

        try:
            LanguageIdentifier(self.language.model).check()
        except (OSError, ValueError) as err:
            raise ConfigError(f"language model unusable: {err}") from None
        try:
            check_languages(self.language.languages, self.language.model)
        except LanguageCodeError as err:
            raise ConfigError(str(err)) from None
        qc = self.quality_classifier
        if qc.model:
            from classifiers.quality_filter import check_quality_model

            try:
                check_quality_model(qc.model, qc.threshold, qc.top_fraction)
            except (OSError, ValueError) as err:
                raise ConfigError(f"quality model unusable: {err}") from None

    def with_languages(self, languages: tuple[str, ...]) -> CurateConfig:
        return dataclasses.replace(self, language=dataclasses.replace(self.language, languages=languages))


def check_eval_sets(config: DecontaminationConfig, where: str) -> None:
    """Read every eval set now (a missing or unreadable file is a one-line error before any work) and
    refuse two files with one name: removed documents and stats name the set."""
    from filters.eval_sets import EvalSetError, load_eval_set

    names: dict[str, str] = {}
    for i, path in enumerate(config.eval_sets):
        try:
            name = load_eval_set(path).name
        except EvalSetError as err:
            raise ConfigError(f"{where}: decontamination.eval_sets[{i}]: {err}") from None
        if name in names:
            raise ConfigError(
                f"{where}: decontamination.eval_sets: {names[name]} and {path} both name the eval set {name!r}"
            )
        names[name] = path
