"""Read evaluation text from plain text, JSON lines or parquet files, a bounded batch at a time."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from common.bounded_input import open_regular

TEXT_CHUNK_CHARS = 1 << 20


def iter_text_batches(path: str | Path, field: str = "text", batch_docs: int = 512) -> Iterator[list[str]]:
    """Yield lists of documents: parquet/JSONL rows (`field`), or ~1 MB newline-cut chunks of a text file."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".parquet"):
        for batch in pq.ParquetFile(p).iter_batches(columns=[field], batch_size=batch_docs):
            yield [t for t in batch.column(0).to_pylist() if t]
    elif name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        yield from _jsonl_batches(p, field, batch_docs)
    else:
        yield from _text_chunks(p)


def _jsonl_batches(path: Path, field: str, batch_docs: int) -> Iterator[list[str]]:
    raw = open_regular(path)  # a FIFO is refused, not waited on
    binary = gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw
    batch: list[str] = []
    with raw, io.TextIOWrapper(binary, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                text = json.loads(line).get(field)
                if text:
                    batch.append(text)
            if len(batch) >= batch_docs:
                yield batch
                batch = []
    if batch:
        yield batch


def _text_chunks(path: Path) -> Iterator[list[str]]:
    with io.TextIOWrapper(open_regular(path), encoding="utf-8", newline="") as handle:  # a FIFO: refused
        pending = ""
        while block := handle.read(TEXT_CHUNK_CHARS):
            pending += block
            cut = pending.rfind("\n") + 1 or (len(pending) if len(pending) >= 4 * TEXT_CHUNK_CHARS else 0)
            if cut:  # at a line end, or anywhere in a text without one (3 GiB of one line grew quadratically)
                yield [pending[:cut]]
                pending = pending[cut:]
        if pending:
            yield [pending]
