"""Typed configuration from YAML mappings: a frozen dataclass per section, one-line errors.

Each room's config class builds its section with ``from_mapping``, which rejects unknown and missing
keys and checks every value against the field's type hint. A user's recipe names only what it
changes: ``merge`` lays it over the bundled recipe, so each default is written once (in that recipe).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, TypeVar

from common.cli import integer, real

T = TypeVar("T")
# Any config number: finite, and a whole one where the field counts; within what int64 / float64 code holds (a
# room bounds its own fields tighter where a value means something, e.g. a timeout).
WHOLE = integer(-(1 << 63), (1 << 63) - 1)
FINITE = real(-1.7976931348623157e308, 1.7976931348623157e308)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one line that names the file and the key."""


def merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base``: mappings merge key by key, other values (and lists) replace.

    An empty (null) section in ``override`` keeps ``base``'s section.
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(out.get(key), dict) and (value is None or isinstance(value, dict)):
            out[key] = merge(out[key], value or {})
        else:
            out[key] = value
    return out


def from_mapping(cls: type[T], data: Any, where: str) -> T:
    """Instantiate the (nested) dataclass ``cls`` from YAML data; ``where`` prefixes every error."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(map(str, set(data) - set(fields)))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    required = (n for n, f in fields.items() if f.default is f.default_factory is dataclasses.MISSING)
    missing = [name for name in required if name not in data]
    if missing:
        raise ConfigError(f"{where}: missing key(s) {', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    return cls(**{key: _convert(value, hints[key], f"{where}.{key}") for key, value in data.items()})


def config_from_args(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """``cls`` from parsed CLI flags named like its fields (``--word-ngrams`` -> ``word_ngrams``).

    A CLI that mirrors a config should not copy every field by hand: flags named otherwise or needing
    a conversion come as ``overrides``, fields with no flag keep their defaults, and a list
    (``nargs``) becomes a tuple, the type frozen configs hold.
    """
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(namespace).items() if k in names}
    return cls(**{**values, **overrides})


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _convert(value, inner, where)
    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if hint in (int, float):  # `min_word_count: 1.5`, `.nan` or 2**64 failed late, or judged nothing
        try:
            return (WHOLE if hint is int else FINITE).check(value, where)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(item, args[0], f"{where}[{i}]") for i, item in enumerate(items))
    raise TypeError(f"{where}: no conversion for type {hint!r}")
