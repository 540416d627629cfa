"""Rows of a JSON Lines file (``.jsonl``, or gzip-compressed when its name ends in ``.gz``), with their line numbers.

Eval sets, eval task data, labelled language-ID sentences and classifier training text all come as JSONL;
each reader checks the fields it needs, but reading the lines is one loop, here: blank lines are skipped,
and a line that is not JSON or a file that cannot be decoded is one error naming ``file:line``, of the
type the caller's room reports bad input with (``error``, a ``ValueError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.bounded_input import MAX_DATA_BYTES, loads_json, open_bounded


class JsonlError(ValueError):
    """A JSONL file that cannot be read; the message is one line naming ``file:line``."""


def iter_jsonl(
    path: str | Path, error: type[ValueError] = JsonlError, limit: int = MAX_DATA_BYTES
) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` for every non-blank line of ``path``, in order (1-based numbers).
    Only a regular file is read, and at most `limit` bytes of it once decompressed (``common.bounded_input``)."""
    path = Path(path)
    n = 0
    try:
        with open_bounded(path, limit) as f:  # bytes, decoded line by line, so a decoding error names its line
            for n, raw in enumerate(f, 1):
                if raw.strip():
                    try:
                        value = loads_json(raw.decode("utf-8-sig" if n == 1 else "utf-8"), f"{path}:{n}")
                    except json.JSONDecodeError as err:
                        raise error(f"{path}:{n}: not JSON ({err.msg})") from None
                    except UnicodeDecodeError as err:
                        raise error(f"{path}:{n}: not UTF-8 ({err.reason} at byte {err.start})") from None
                    except ValueError as err:  # nested too deeply
                        raise error(str(err)) from None
                    yield n, value
    except (OSError, EOFError) as err:  # a missing or refused file, a broken or truncated gzip stream
        raise error(f"{path}:{n + 1}: unreadable ({err})") from None
