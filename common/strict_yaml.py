"""YAML for configs: safe types only, no aliases, no duplicate keys, and a size limit on the file.

An alias expands to a copy of its anchor's value each time it is used, so ten lines of nested aliases
make a value of a billion items (the audit's 10 KB recipe `name:` passed 4 GiB; the error message that
quoted it did too). A config has no use for aliases, so they are refused where they are met. A key given
twice is resolved to the last by PyYAML without a word; here it is an error naming the key and line. An
integer of more than about 4,200 digits (Python's limit on `int(str)` and `str(int)`) is a YAML error too.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from common.bounded_input import MAX_CONFIG_BYTES, read_bounded

MAX_INT_BITS = 14_000  # about 4,200 decimal digits: below Python's limit on printing an int


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases and duplicate mapping keys."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed in a config", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                break
            if duplicate:
                raise ConstructorError(None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # type: ignore[no-untyped-def]
        """Python's 4,300-digit limit on int(str) raised a ValueError no config loader expects (decimal), or
        let through (hex) an integer no error message can print: either is a YAML error here."""
        try:
            value = super().construct_yaml_int(node)
        except ValueError:
            value = None
        if value is None or abs(value).bit_length() > MAX_INT_BITS:
            raise ConstructorError(None, None, f"an integer of {len(node.value):,} digits", node.start_mark)
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def load_text(text: str) -> Any:
    """Parse YAML text with `StrictLoader` (yaml.YAMLError on what it refuses, nesting too deep included: PyYAML
    recurses per level, and 20,000 `[` in a 40 KB recipe were a RecursionError traceback)."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def load_file(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> Any:
    """A regular file of at most `limit` bytes, UTF-8, parsed strictly. OSError (missing, not a regular file,
    too large), UnicodeDecodeError or yaml.YAMLError: callers turn them into their one-line error."""
    return load_text(read_bounded(path, limit).decode("utf-8"))


def first_line(err: yaml.YAMLError) -> str:
    """The problem and its line of a YAML error, in one line."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).strip().splitlines()[0]
    return f"{problem} (line {mark.line + 1})" if mark is not None else problem
