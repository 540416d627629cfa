"""Documents for classifier training from parquet, jsonl or text files (or folders of them).

parquet: the ``text`` column (curated or removed output of this project, or any dataset). jsonl /
jsonl.gz / json lines: the ``text`` field. txt: one document per line. An optional ``group`` field or
column keeps related documents (sections of one article) on the same side of the held-out split.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.jsonl import iter_jsonl

SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json", ".txt")


@dataclass(frozen=True)
class TextDoc:
    text: str
    group: str  # documents sharing a group go to the same split


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
    if not path.is_file():
        raise FileNotFoundError(f"input not found: {path}")
    if not path.name.endswith(SUFFIXES):
        raise ValueError(f"{path}: unsupported input (expected {', '.join(SUFFIXES)})")
    return [path]


def _parquet(path: Path, field: str) -> Iterator[TextDoc]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if field not in table.column_names:
        raise ValueError(f"{path}: no {field!r} column")
    texts = table.column(field).to_pylist()
    groups = table.column("group").to_pylist() if "group" in table.column_names else [None] * len(texts)
    for i, (text, group) in enumerate(zip(texts, groups, strict=True)):
        if text:
            yield TextDoc(text, str(group) if group is not None else f"{path}#{i}")


def _jsonl(path: Path, field: str) -> Iterator[TextDoc]:
    for n, row in iter_jsonl(path):
        text = row.get(field) if isinstance(row, dict) else None
        if isinstance(text, str) and text.strip():
            group = row.get("group")
            yield TextDoc(text, str(group) if group is not None else f"{path}#{n}")


def _txt(path: Path) -> Iterator[TextDoc]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield TextDoc(line.rstrip("\n"), f"{path}#{n}")


def read_documents(paths: Sequence[str | Path], field: str = "text") -> list[TextDoc]:
    """Every non-empty document of every input, in order."""
    docs: list[TextDoc] = []
    for raw in paths:
        for path in _files(Path(raw)):
            if path.suffix == ".parquet":
                docs.extend(_parquet(path, field))
            elif path.suffix == ".txt":
                docs.extend(_txt(path))
            else:
                docs.extend(_jsonl(path, field))
    return docs
