"""A run directory's documents: ``deduped/`` when dedup ran, else ``curated/`` (the one rule, common.run_dir)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.run_dir import kept_documents_dir
from tokenizer.inputs import resolve_parquet


def write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": ["a document"]}), path)
    return path


def test_curated_documents_without_dedup(tmp_path: Path) -> None:
    curated = [write(tmp_path / "curated" / f"{i:05d}.parquet") for i in range(2)]
    write(tmp_path / "removed" / "url" / "00000.parquet")
    (tmp_path / "deduped").mkdir()
    write(tmp_path / "deduped" / ".00000.parquet.x1.tmp.parquet")  # a writer's temp file is no output yet
    assert kept_documents_dir(tmp_path) == tmp_path / "curated"
    assert resolve_parquet(tmp_path) == curated


def test_deduped_documents_win_once_dedup_wrote_them(tmp_path: Path) -> None:
    write(tmp_path / "curated" / "00000.parquet")
    deduped = write(tmp_path / "deduped" / "00000.parquet")
    assert kept_documents_dir(tmp_path) == tmp_path / "deduped"
    assert resolve_parquet([tmp_path]) == [deduped]


def test_a_plain_folder_is_read_whole_and_nothing_is_an_error(tmp_path: Path) -> None:
    files = [write(tmp_path / "docs" / "a.parquet"), write(tmp_path / "docs" / "sub" / "b.parquet")]
    assert kept_documents_dir(tmp_path / "docs") is None
    assert resolve_parquet(tmp_path / "docs") == sorted(files)
    assert resolve_parquet(str(tmp_path / "docs" / "*.parquet")) == files[:1]
    with pytest.raises(FileNotFoundError, match="no parquet files"):
        resolve_parquet(tmp_path / "empty")
