"""Recipe YAML -> each room's configuration, validated before any work starts.

A recipe is one YAML mapping; the bundled ``recipes/fineweb.yaml`` holds every value, each with its
source. This module only reads YAML, lays a user's recipe over the bundled one (so a recipe names only
what it changes), checks the top level and hands each room its sections: the curate stage's to
``curate.config.CurateConfig``, which types and validates them; the ``dedup`` section to
``dedup.config.DedupSection`` (whether the stages run, the URL / exact passes, the dump's index), which
gives ``dedup.config.DedupConfig`` with FineWeb's MinHash parameters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common import strict_yaml
from common.config import ConfigError, from_mapping, merge
from common.names import checked_name
from curate.config import CurateConfig
from dedup.config import DedupSection

DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "fineweb.yaml"


@dataclass(frozen=True)
class Recipe:
    name: str
    curate: CurateConfig
    dedup: DedupSection
    source_file: str | None = None

    def with_languages(self, languages: tuple[str, ...]) -> Recipe:
        return dataclasses.replace(self, curate=self.curate.with_languages(languages))

    def to_dict(self) -> dict[str, Any]:
        """The recipe as its YAML reads (``run.json`` records it; a rerun must match it)."""
        sections = {**dataclasses.asdict(self.curate), "dedup": dataclasses.asdict(self.dedup)}
        return {"name": self.name, **sections, "source_file": self.source_file}


TOP_LEVEL = ("name", *CurateConfig.sections(), "dedup")


def read_yaml(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"recipe not found: {path}")
    try:
        data = strict_yaml.load_file(path) or {}
    except OSError as err:
        raise ConfigError(f"recipe {path}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = strict_yaml.first_line(err) if isinstance(err, yaml.YAMLError) else str(err)
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a mapping at the top level")
    return data


def load_recipe(path: str | Path | None = None) -> Recipe:
    """Read and validate a recipe (the bundled FineWeb recipe by default)."""
    path = Path(path) if path else DEFAULT_RECIPE
    data = merge(read_yaml(DEFAULT_RECIPE), read_yaml(path))
    where = str(path)
    unknown = sorted(map(str, set(data) - set(TOP_LEVEL)))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(TOP_LEVEL)}")
    checked_name(data["name"], f"{where}.name:")  # it names refilter's output folder
    curate = CurateConfig.from_mapping({key: data[key] for key in CurateConfig.sections()}, where)
    dedup = from_mapping(DedupSection, data["dedup"], f"{where}.dedup")
    try:
        dedup.config()
    except ValueError as err:
        raise ConfigError(f"{where}.dedup: {err}") from None
    return Recipe(data["name"], curate, dedup, source_file=str(path))
