"""Documents on disk (DESIGN.md's border: parquet, one row per document) and the one writer of them.

Curate and dedup both write documents with ``DocumentWriter``, datatrove's ``ParquetWriter`` made

* atomic: a task writes ``<name>.tmp`` and renames it on a clean close; if the pipeline raises, the
  temporary files are deleted, so a killed or failed task leaves nothing half-written and a rerun
  (datatrove redoes unfinished tasks) neither loses nor duplicates a document. On an object store (no
  rename) the file is written in the node's scratch and uploaded to its final key on a clean close, in the
  background while the task goes on (``common.uploads``: the task completes only once it landed);
* schema-stable: the columns are fixed before the first row, either given (curate knows its signals)
  or the union of an input folder's files plus added columns, read at the first write (dedup's input
  may not exist when its pipeline is built). datatrove's default infers the schema from the first
  document, which breaks on a column that is null there. A missing value is a null, a value of the
  wrong Python type is converted to the column's type.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.data import Document
from datatrove.io import DataFolderLike, OutputFileManager, get_datafolder
from datatrove.pipeline.writers.parquet import ParquetWriter

from common.storage import as_path, is_remote, on_object_store
from common.uploads import upload_later

STRING_COLUMNS = ("url", "dump", "date", "warc_path", "language", "filter_reason")
DOCUMENT_GLOB = "**/*.parquet"
TMP_SUFFIX = ".tmp"


def document_schema(float_columns: Sequence[str] = (), extra: Sequence[pa.Field] = ()) -> pa.Schema:
    """``text``, ``id``, the string metadata columns, ``language_score``, the given float columns, ``extra``."""
    fields = [pa.field("text", pa.string()), pa.field("id", pa.string())]
    fields += [pa.field(name, pa.string()) for name in STRING_COLUMNS]
    fields += [pa.field("language_score", pa.float64())]
    fields += [pa.field(name, pa.float64()) for name in float_columns if name != "language_score"]
    fields += list(extra)
    return pa.schema(fields)


def folder_schema(folder: DataFolderLike, extra: Sequence[pa.Field] = ()) -> pa.Schema | None:
    """Unified schema of the parquet files in ``folder`` plus ``extra`` fields (None if no file)."""
    source = get_datafolder(folder)
    files = source.list_files(glob_pattern=DOCUMENT_GLOB)
    if not files:
        return None
    schemas = []
    for name in files:
        with source.open(name, "rb") as f:
            schemas.append(pq.read_schema(f))
    return _with_fields(pa.unify_schemas(schemas, promote_options="permissive"), extra)


def _with_fields(schema: pa.Schema, extra: Sequence[pa.Field]) -> pa.Schema:
    for field in extra:
        if field.name not in schema.names:
            schema = schema.append(field)
    return schema


class SharedSchema:
    """``folder_schema`` of one folder, read once for every writer of a task that is given this object as its
    ``schema_from`` (each writer listed the folder and opened its files: on a store three round trips apiece,
    one after another, before the task's first document was written). It travels with the pipeline: the
    copy each task process gets reads the folder once, when its first writer needs the schema."""

    def __init__(self, folder: DataFolderLike) -> None:
        self.folder = folder
        self._read = False
        self._schema: pa.Schema | None = None

    def schema(self, extra: Sequence[pa.Field] = ()) -> pa.Schema | None:
        if not self._read:
            self._schema, self._read = folder_schema(self.folder), True
        return None if self._schema is None else _with_fields(self._schema, extra)

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "_read": False, "_schema": None}  # a task's copy reads the folder as it is

    def __str__(self) -> str:
        return str(self.folder)


def open_parquet(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """A parquet file read through fsspec when ``path`` is a URL (pyarrow's own S3 client would ignore the
    store's endpoint and credentials settings), directly when it is local."""
    if is_remote(path):
        return pq.ParquetFile(as_path(path).open("rb"))
    return pq.ParquetFile(path)


def _to_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _coercion(type_: pa.DataType) -> Callable[[Any], Any] | None:
    """How a metadata value becomes a value of the column's type (None: as it is)."""
    if pa.types.is_floating(type_):
        return _to_float
    if pa.types.is_integer(type_):
        return int
    if pa.types.is_string(type_):
        return str
    return None


class StagedFiles(OutputFileManager):
    """A writer's open files when its folder is on an object store: local files in the node's scratch
    (``tempfile``'s folder, the run's ``--scratch``), made in the task's process, uploaded whole once closed."""

    def __init__(self) -> None:
        super().__init__(fs=None, mode="wb", compression=None)
        self.local: dict[str, str] = {}  # output name -> its local file

    def get_file(self, filename: str) -> Any:
        if filename not in self._output_files:
            fd, path = tempfile.mkstemp(prefix=".", suffix=f"-{os.path.basename(filename)}")
            self.local[filename] = path
            self._output_files[filename] = os.fdopen(fd, "wb")
        return self._output_files[filename]


class DocumentWriter(ParquetWriter):
    """zstd parquet, one file per task (``${rank}.parquet`` by default), committed by rename.

    A pipeline step (writes and forwards every document) and a filter's exclusion writer
    (``with writer: writer.write(doc, rank)``). Give ``schema``, or ``schema_from`` (a folder of
    parquet files) plus ``extra_fields``.
    """

    name = "💾 documents"

    def __init__(
        self,
        output_folder: DataFolderLike,
        schema: pa.Schema | None = None,
        schema_from: DataFolderLike | SharedSchema | None = None,
        extra_fields: Sequence[pa.Field] = (),
        output_filename: str = "${rank}.parquet",
    ):
        if (schema is None) == (schema_from is None):
            raise ValueError("DocumentWriter needs exactly one of schema and schema_from")
        super().__init__(
            output_folder,
            output_filename=output_filename + TMP_SUFFIX,
            compression="zstd",
            expand_metadata=True,
            max_file_size=-1,
            schema=schema,
        )
        self.schema_from = schema_from
        self.extra_fields = list(extra_fields)
        self.staged = on_object_store(self.output_folder.fs)
        if self.staged:
            self.output_mg = StagedFiles()
        self._tmp_files: set[str] = set()
        self._columns: tuple[pa.Schema, list[tuple[str, Callable[[Any], Any] | None]]] | None = None

    def _default_adapter(self, document: Document) -> dict:
        """One row of the schema: the text as it is, the id as a string, each column from the metadata."""
        if self.schema is None:
            shared = isinstance(self.schema_from, SharedSchema)
            read = self.schema_from.schema if shared else partial(folder_schema, self.schema_from)
            self.schema = read(self.extra_fields)
            if self.schema is None:
                raise FileNotFoundError(f"no parquet file in {self.schema_from} to take the schema from")
        if self._columns is None or self._columns[0] is not self.schema:
            # the schema's columns with their coercion, looked up once, not per row
            self._columns = (self.schema, [(f.name, _coercion(f.type)) for f in self.schema])
        get = document.metadata.get
        row: dict[str, Any] = {}
        for name, convert in self._columns[1]:
            if name == "text":
                row[name] = document.text
            elif name == "id":
                row[name] = str(document.id)
            else:
                value = get(name)
                row[name] = value if value is None or convert is None else convert(value)
        return row

    def _write(self, document: dict, file_handler: Any, filename: str) -> None:
        self._tmp_files.add(filename)
        super()._write(document, file_handler, filename)

    def close(self) -> None:
        super().close()
        for tmp in sorted(self._tmp_files):
            final = tmp.removesuffix(TMP_SUFFIX)
            if self.staged:
                local = self.output_mg.local.pop(tmp)
                upload_later(self.output_folder.fs, local, self.output_folder.resolve_paths(final))
            else:
                self.output_folder.mv(tmp, final)
        self._tmp_files.clear()

    def abort(self) -> None:
        """Drop everything written so far (the task failed; a rerun rewrites it)."""
        for writer in list(self._writers.values()):
            with contextlib.suppress(Exception):
                writer.close()
        self._writers.clear()
        self._batches.clear()
        with contextlib.suppress(Exception):
            self.output_mg.close()
        for tmp in self._tmp_files:
            with contextlib.suppress(FileNotFoundError):
                if self.staged:
                    os.unlink(self.output_mg.local.pop(tmp, ""))
                else:
                    self.output_folder.rm(tmp)
        self._tmp_files.clear()

    def __exit__(self, exc_type: object, exc_val: object, exc_tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
