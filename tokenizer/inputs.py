"""Find the curated parquet files behind a run directory, folder, glob or file list."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

# A run directory holds both; deduplicated documents are the ones to train and mix on.
RUN_SUBDIRS = ("deduped", "curated")


def resolve_parquet(inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Return the sorted parquet files named by `inputs` (each a run dir, a folder, a glob or a file).

    A run dir (`out/<DUMP>/`) resolves to `deduped/` when that has parquet, else `curated/`.
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
        for sub in RUN_SUBDIRS:
            files = _parquet_under(path / sub)
            if files:
                return files
        return _parquet_under(path)
    if path.is_file():
        return [path]
    return [Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file() and _visible(Path(p))]


def _parquet_under(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return [p for p in folder.rglob("*.parquet") if p.is_file() and _visible(p)]


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")
