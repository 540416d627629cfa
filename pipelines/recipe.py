"""Recipe YAML -> typed configuration, validated before any work starts.

A recipe holds every threshold of the curate stage (see ``recipes/fineweb.yaml``); an unknown key, a
wrong type or a missing model file is a one-line ``RecipeError``, never a failure mid-run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from filters.rules import C4QualityRule, FineWebQualityRule, GopherQualityRule, GopherRepetitionRule
from filters.signals import SignalConfig

DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "fineweb.yaml"


class RecipeError(ValueError):
    """A recipe that cannot be used; the message is one line that names the file and the key."""


@dataclass(frozen=True)
class PrecheckConfig:
    enabled: bool = True
    threshold: float = 0.9


@dataclass(frozen=True)
class ExtractionConfig:
    favour_precision: bool = True
    deduplicate: bool = True
    timeout: float = 1.0
    max_html_bytes: int = 10_000_000
    precheck: PrecheckConfig = field(default_factory=PrecheckConfig)


@dataclass(frozen=True)
class LanguageConfig:
    languages: tuple[str, ...] = ("en",)
    threshold: float = 0.65
    model: str | None = None


@dataclass(frozen=True)
class UrlFilterConfig:
    enabled: bool = True


@dataclass(frozen=True)
class RulesConfig:
    gopher_repetition: GopherRepetitionRule = field(default_factory=GopherRepetitionRule)
    gopher_quality: GopherQualityRule = field(default_factory=GopherQualityRule)
    c4_quality: C4QualityRule = field(default_factory=C4QualityRule)
    fineweb_quality: FineWebQualityRule = field(default_factory=FineWebQualityRule)

    def ordered(self) -> list:
        """FineWeb's order: Gopher repetition, Gopher quality, C4, FineWeb."""
        return [self.gopher_repetition, self.gopher_quality, self.c4_quality, self.fineweb_quality]


@dataclass(frozen=True)
class QualityClassifierConfig:
    model: str | None = None
    threshold: float | None = None
    top_fraction: float | None = None


@dataclass(frozen=True)
class PiiConfig:
    emails: bool = True
    ips: bool = True


@dataclass(frozen=True)
class DedupRecipe:
    enabled: bool = True


@dataclass(frozen=True)
class Recipe:
    name: str = "fineweb"
    url_filter: UrlFilterConfig = field(default_factory=UrlFilterConfig)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    language: LanguageConfig = field(default_factory=LanguageConfig)
    signals: SignalConfig = field(default_factory=SignalConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    quality_classifier: QualityClassifierConfig = field(default_factory=QualityClassifierConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)
    dedup: DedupRecipe = field(default_factory=DedupRecipe)
    source_file: str | None = None

    def with_languages(self, languages: tuple[str, ...]) -> Recipe:
        return dataclasses.replace(self, language=dataclasses.replace(self.language, languages=languages))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls: type, data: Any, where: str) -> Any:
    """Instantiate a (nested) dataclass from plain YAML data, rejecting unknown keys."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RecipeError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(fields)}"
        )
    kwargs = {}
    defaults = cls()
    for key, value in data.items():
        current = getattr(defaults, key)
        if dataclasses.is_dataclass(current):
            kwargs[key] = _build(type(current), value, f"{where}.{key}")
        else:
            kwargs[key] = _convert(value, current, f"{where}.{key}")
    return cls(**kwargs)


def _convert(value: Any, default: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: expected true/false, got {value!r}")
        return value
    if isinstance(default, int | float) and not isinstance(default, bool):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecipeError(f"{where}: expected a number, got {value!r}")
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise RecipeError(f"{where}: expected a list, got {value!r}")
        return tuple(value)
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        try:
            return {int(k): float(v) for k, v in value.items()}
        except (TypeError, ValueError) as err:
            raise RecipeError(f"{where}: expected n: fraction pairs ({err})") from None
    return value


def load_recipe(path: str | Path | None = None) -> Recipe:
    """Read and validate a recipe (the bundled FineWeb recipe by default)."""
    path = Path(path) if path else DEFAULT_RECIPE
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = str(err).strip().splitlines()[0]
        raise RecipeError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping at the top level")
    recipe = _build(Recipe, data, str(path))
    recipe = dataclasses.replace(recipe, source_file=str(path))
    validate(recipe, str(path))
    return recipe


def validate(recipe: Recipe, where: str) -> None:
    """Checks that need more than types: ranges and files that must exist."""
    if not 0 <= recipe.language.threshold <= 1:
        raise RecipeError(f"{where}: language.threshold must be in [0, 1]")
    if recipe.language.threshold < 0.5:
        raise RecipeError(f"{where}: language.threshold below 0.5 is ambiguous (two languages could pass)")
    if recipe.extraction.timeout <= 0:
        raise RecipeError(f"{where}: extraction.timeout must be > 0 seconds")
    for label, model in (
        ("language.model", recipe.language.model),
        ("quality_classifier.model", recipe.quality_classifier.model),
    ):
        if model and not Path(model).is_file():
            raise RecipeError(f"{where}: {label} not found: {model}")
