"""Atomic parquet writer for documents: a killed task leaves no half-written file behind.

Rows go to ``.tmp/<name>`` and the file is renamed into place only when the task's pipeline finished
without an error, so a rerun (datatrove skips completed tasks and redoes the others) neither loses
nor duplicates a document. Columns are fixed up front: a missing value is a null, never a schema
mismatch between the first and a later batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.data import Document, DocumentsPipeline
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.base import PipelineStep

STRING_COLUMNS = ("url", "dump", "date", "warc_path", "language", "filter_reason")


def document_schema(float_columns: Sequence[str] = (), extra: Sequence[pa.Field] = ()) -> pa.Schema:
    """``text``, ``id``, the string metadata columns, ``language_score`` and the given float columns."""
    fields = [pa.field("text", pa.string()), pa.field("id", pa.string())]
    fields += [pa.field(name, pa.string()) for name in STRING_COLUMNS]
    fields += [pa.field("language_score", pa.float64())]
    fields += [pa.field(name, pa.float64()) for name in float_columns if name != "language_score"]
    fields += list(extra)
    return pa.schema(fields)


def _coerce(value: Any, type_: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_floating(type_):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    if pa.types.is_integer(type_):
        return int(value)
    if pa.types.is_string(type_):
        return str(value)
    return value


class AtomicParquetWriter(PipelineStep):
    """Write documents to ``{rank:05d}.parquet`` (zstd) under ``output_folder``, atomically per task.

    Usable as a pipeline step (writes and forwards every document) and as a filter's exclusion
    writer (``with writer: writer.write(doc, rank)``).
    """

    name = "💾 Parquet (atomic)"
    type = "💽 - WRITER"

    def __init__(
        self,
        output_folder: DataFolderLike,
        schema: pa.Schema,
        compression: str = "zstd",
        batch_size: int = 500,
        filename: str = "{rank:05d}.parquet",
    ):
        super().__init__()
        self.output_folder = get_datafolder(output_folder)
        self.schema = schema
        self.compression = compression
        self.batch_size = batch_size
        self.filename = filename
        self._rows: list[dict] = []
        self._writer: pq.ParquetWriter | None = None
        self._handle = None
        self._name: str | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_rows=[], _writer=None, _handle=None, _name=None)
        return state

    def _row(self, doc: Document) -> dict:
        meta = doc.metadata
        row = {}
        for field in self.schema:
            if field.name == "text":
                row["text"] = doc.text
            elif field.name == "id":
                row["id"] = str(doc.id)
            else:
                row[field.name] = _coerce(meta.get(field.name), field.type)
        return row

    def write(self, doc: Document, rank: int = 0, **_: Any) -> None:
        if self._name is None:
            self._name = self.filename.format(rank=rank)
        self._rows.append(self._row(doc))
        self.stat_update("written")
        if len(self._rows) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        if self._writer is None:
            self._handle = self.output_folder.open(f".tmp/{self._name}", "wb")
            self._writer = pq.ParquetWriter(self._handle, self.schema, compression=self.compression)
        self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self.schema))
        self._rows = []

    def close(self, commit: bool = True) -> None:
        """Finish the file and move it into place; without ``commit`` the partial file is deleted."""
        if commit:
            self._flush()
        if self._writer is not None:
            self._writer.close()
            self._handle.close()
            tmp = f".tmp/{self._name}"
            if commit:
                self.output_folder.mv(tmp, self._name)
            else:
                self.output_folder.rm(tmp)
        self._rows, self._writer, self._handle, self._name = [], None, None, None

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with self:
            for doc in data:
                with self.track_time():
                    self.write(doc, rank)
                yield doc
