"""datatrove's ParquetWriter made atomic and schema-stable for document outputs.

* Files are written as ``<name>.tmp`` and renamed on a clean close; if the pipeline raises, the
  temporary files are deleted, so ``deduped/`` never holds a half-written task.
* The schema is the union of the input files' schemas plus the columns dedup adds, resolved at
  the first write (inputs may not exist yet when the pipeline is built). Inferring it from the
  first document, datatrove's default, breaks on a column that is null in that document.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.io import DataFolderLike, get_datafolder
from datatrove.pipeline.writers.parquet import ParquetWriter

from dedup.records import TMP_SUFFIX

DOCUMENT_GLOB = "**/*.parquet"


def input_schema(folder: DataFolderLike, extra: list[pa.Field]) -> pa.Schema | None:
    """Unified schema of the parquet files in ``folder`` plus ``extra`` fields (None if no file)."""
    source = get_datafolder(folder)
    files = source.list_files(glob_pattern=DOCUMENT_GLOB)
    if not files:
        return None
    schemas = []
    for name in files:
        with source.open(name, "rb") as f:
            schemas.append(pq.read_schema(f))
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    for field in extra:
        if field.name not in schema.names:
            schema = schema.append(field)
    return schema


class AtomicParquetWriter(ParquetWriter):
    """zstd parquet, one file per task (``<rank>.parquet``), committed by rename."""

    def __init__(
        self,
        output_folder: DataFolderLike,
        schema_from: DataFolderLike | None = None,
        extra_fields: list[pa.Field] | None = None,
        output_filename: str = "${rank}.parquet",
        **kwargs: Any,
    ):
        super().__init__(
            output_folder,
            output_filename=output_filename + TMP_SUFFIX,
            compression="zstd",
            expand_metadata=True,
            max_file_size=-1,
            **kwargs,
        )
        self.schema_from = schema_from
        self.extra_fields = extra_fields or []
        self._tmp_files: set[str] = set()

    def _write(self, document: dict, file_handler: Any, filename: str) -> None:
        if self.schema is None and self.schema_from is not None:
            self.schema = input_schema(self.schema_from, self.extra_fields)
        self._tmp_files.add(filename)
        super()._write(document, file_handler, filename)

    def close(self) -> None:
        super().close()
        for tmp in sorted(self._tmp_files):
            self.output_folder.mv(tmp, tmp.removesuffix(TMP_SUFFIX))
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
                self.output_folder.rm(tmp)
        self._tmp_files.clear()

    def __exit__(self, exc_type: object, exc_val: object, exc_tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
