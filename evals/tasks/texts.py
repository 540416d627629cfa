"""Documents for bits per byte: a `.txt` file (one document), `.jsonl`/`.jsonl.gz` or parquet rows with `text`,
or a folder of those (searched recursively, sorted by path)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.bounded_input import MAX_DATA_BYTES, read_bounded, read_parquet_bounded
from common.jsonl import iter_jsonl
from evals.tasks.base import TaskDataError
from evals.tasks.base import spread as spread  # where ablate and final take it from

SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".parquet")


def text_files(path: Path) -> list[Path]:
    """The readable files under `path` (or `path` itself)."""
    if not path.exists():
        raise TaskDataError(f"{path} does not exist")
    if path.is_file():
        if not path.name.endswith(SUFFIXES):
            raise TaskDataError(f"{path}: not one of {', '.join(SUFFIXES)}")
        return [path]
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
    if not found:
        raise TaskDataError(f"{path} holds no {', '.join(SUFFIXES)} files")
    return found


def read_documents(path: str | Path, column: str = "text") -> list[str]:
    """Every non-empty document text under `path`; a jsonl or parquet file without `column` is an error."""
    docs: list[str] = []
    for file in text_files(Path(path)):
        docs.extend(t for t in _read(file, column) if t)
    if not docs:
        raise TaskDataError(f"{path}: no non-empty `{column}` documents")
    return docs


def _read(file: Path, column: str) -> list[str]:
    if file.name.endswith(".txt"):
        try:
            return [read_bounded(file, MAX_DATA_BYTES).decode("utf-8")]
        except (OSError, UnicodeDecodeError) as err:
            raise TaskDataError(f"{file}: unreadable ({err})") from None
    if file.name.endswith(".parquet"):
        try:
            schema = pq.read_schema(file)
            if column not in schema.names:
                raise TaskDataError(f"{file}: no `{column}` column (has {', '.join(schema.names)})")
            table = read_parquet_bounded(file, [column])  # a parquet bomb is refused, not decoded
        except (OSError, pa.ArrowException) as err:
            raise TaskDataError(f"{file}: unreadable ({err})") from None
        return [t for t in table.column(column).to_pylist() if isinstance(t, str)]
    texts = []
    for n, row in iter_jsonl(file, TaskDataError):
        if not isinstance(row, dict) or not isinstance(row.get(column), str):
            raise TaskDataError(f"{file}:{n}: no string `{column}` field")
        texts.append(row[column])
    return texts


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a `.jsonl` or `.jsonl.gz` file (blank lines skipped); a bad line is a one-line error."""
    file = Path(path)
    if not file.is_file():
        raise TaskDataError(f"{file} does not exist")
    rows = [row for _, row in iter_jsonl(file, TaskDataError)]
    if not rows:
        raise TaskDataError(f"{file} is empty")
    return rows
