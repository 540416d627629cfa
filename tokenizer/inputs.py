"""Find the curated parquet files behind a run directory, folder, glob or file list."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from common.bounded_input import InputRefused, open_regular, refuse_parquet_bomb
from common.run_dir import is_visible, kept_documents_dir, parquet_under


def resolve_parquet(inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Return the sorted parquet files named by `inputs` (each a run dir, a folder, a glob or a file).

    A run dir (`out/<DUMP>/`) resolves to its kept documents (`common.run_dir`: `deduped/` when that has
    parquet, else `curated/`).
    Hidden files (temp files of writers in progress) are skipped. Raises if nothing matches.
    """
    items = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    found: set[Path] = set()
    for item in items:
        found.update(_resolve_one(str(item)))
    if not found:
        raise FileNotFoundError(f"no parquet files found in {[str(i) for i in items]}")
    return sorted(found)


def _resolve_one(item: str) -> list[Path]:
    path = Path(item)
    if path.is_dir():
        return parquet_under(kept_documents_dir(path) or path)
    if path.is_file():
        return [path]
    return [Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file() and is_visible(Path(p))]


def check_parquet_columns(files: Iterable[Path], column: str, what: str = "input") -> None:
    """Each file is a regular parquet file with `column` whose text is no decompression bomb, else one
    ValueError (InputRefused, an OSError, for a bomb) naming it: a truncated or foreign file, or a missing
    column, failed as a traceback after the output was begun; a bomb took minutes and gigabytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        try:
            with open_regular(file) as handle:  # a FIFO is refused, not waited on
                names = pq.read_schema(handle).names
                handle.seek(0)
                refuse_parquet_bomb(handle, f"{what} {file}", column, os.fstat(handle.fileno()).st_size)
        except InputRefused:
            raise
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"{what} {file}: not a readable parquet file ({err})") from None
        if column not in names:
            raise ValueError(f"{what} {file}: no `{column}` column (columns: {', '.join(names)})")
