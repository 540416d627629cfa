"""Evaluation items read from the files a recipe names, as (label, query) pairs for decontamination.

Decontamination needs only the text an evaluation scores (the label: a gold answer, a sentence, a
passage) and, where there is one, the prompt it follows (the query), as datatrove's
``NGramsDecontIndexer`` takes them. Eval sets come in several shapes; each is recognised by its
file name and keys, and a file this module cannot read is a one-line ``EvalSetError``:

* BLiMP (``*.jsonl[.gz]`` with ``sentence_good`` / ``sentence_bad``): both sentences, no query;
* lm-eval-style JSONL (``--log_samples`` records with ``doc`` / ``arguments`` / ``target``): the
  first argument's context as query, the target as label;
* JSONL or parquet of eval items: a query key (``query``, ``prompt``, ``context``, ``question``,
  ``input``) and a label key (``gold``, ``answer``, ``target``, ``label``, ``continuation``,
  ``text``); a list label gives one item per entry;
* text files (``*.txt``): one item per non-empty line (WikiText's layout: a paragraph per line).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.bounded_input import open_bounded, read_parquet_bounded
from common.jsonl import iter_jsonl

QUERY_KEYS = ("query", "prompt", "context", "question", "input")
LABEL_KEYS = ("gold", "answer", "target", "label", "continuation", "text")
BLIMP_KEYS = ("sentence_good", "sentence_bad")


class EvalSetError(ValueError):
    """An eval set file that cannot be read; the message is one line naming the file."""


@dataclass(frozen=True)
class EvalItem:
    label: str
    query: str | None = None


@dataclass(frozen=True)
class EvalSet:
    name: str
    items: tuple[EvalItem, ...]


def eval_set_name(path: Path) -> str:
    """``blimp.jsonl.gz`` -> ``blimp``: the name removed documents and stats carry."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".parquet", ".txt"):
        name = name.removesuffix(suffix)
    return name.replace(" ", "_").replace(":", "_") or path.name


def load_eval_set(path: str | Path, name: str | None = None) -> EvalSet:
    """Read one eval set file (the format is told by its name and keys)."""
    path = Path(path)
    if not path.is_file():
        raise EvalSetError(f"eval set not found: {path}")
    suffixes = path.name.lower()
    if suffixes.endswith(".txt") or suffixes.endswith(".txt.gz"):
        items = [EvalItem(line.strip()) for line in _text_lines(path) if line.strip()]
    elif suffixes.endswith(".parquet"):
        items = [item for i, row in enumerate(_parquet_rows(path)) for item in _items(row, path, i)]
    elif suffixes.endswith((".jsonl", ".jsonl.gz", ".json")):
        items = [item for i, row in enumerate(_jsonl_rows(path)) for item in _items(row, path, i)]
    else:
        raise EvalSetError(f"{path}: unknown eval set format (expected .jsonl[.gz], .parquet or .txt)")
    if not items:
        raise EvalSetError(f"{path}: no eval items")
    return EvalSet(name or eval_set_name(path), tuple(items))


def _text_lines(path: Path) -> Iterator[str]:
    try:
        with io.TextIOWrapper(open_bounded(path), encoding="utf-8") as f:
            yield from f
    except (OSError, UnicodeDecodeError) as err:
        raise EvalSetError(f"{path}: unreadable ({err})") from None


def _jsonl_rows(path: Path) -> Iterator[dict]:
    for n, row in iter_jsonl(path, EvalSetError):
        if not isinstance(row, dict):
            raise EvalSetError(f"{path}:{n}: expected a JSON object per line")
        yield row


def _parquet_rows(path: Path) -> Iterator[dict]:
    try:
        table = read_parquet_bounded(path)  # a parquet bomb is refused, not decoded
    except Exception as err:  # pyarrow raises several types for a bad file; InputRefused for a bomb
        raise EvalSetError(f"{path}: not a readable parquet file ({err})") from None
    yield from table.to_pylist()


def _items(row: dict[str, Any], path: Path, index: int) -> list[EvalItem]:
    if all(k in row for k in BLIMP_KEYS):
        return [EvalItem(row[k]) for k in BLIMP_KEYS if row[k]]
    if "doc" in row and "target" in row:  # lm-eval --log_samples record
        args = row.get("arguments") or []
        query = _first_context(args)
        return [EvalItem(str(t), query) for t in _as_list(row["target"]) if str(t).strip()]
    query = next((str(row[k]) for k in QUERY_KEYS if row.get(k) not in (None, "")), None)
    label_key = next((k for k in LABEL_KEYS if k in row and row[k] not in (None, "")), None)
    if label_key is None:
        raise EvalSetError(f"{path}: item {index} has no label key (one of {', '.join(LABEL_KEYS)})")
    return [EvalItem(str(v), query) for v in _as_list(row[label_key]) if str(v).strip()]


def _first_context(arguments: Any) -> str | None:
    """lm-eval logs ``arguments`` as a dict of ``gen_args_N`` or a list of [context, continuation]."""
    first = next(iter(arguments.values()), None) if isinstance(arguments, dict) else next(iter(arguments), None)
    if isinstance(first, dict):
        first = first.get("arg_0")
    elif isinstance(first, list | tuple) and first:
        first = first[0]
    return first if isinstance(first, str) and first.strip() else None


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]
