"""Write one output shard in datatrove's layout from document slices of token parts.

`<name>.ds` holds the little-endian tokens, `<name>.ds.index` the uint64 cumulative document ends
and `<name>.ds.metadata` "<tokenizer>|<token size>", the token count and its humanised form, as
datatrove's TokenizedFile writes them. Each file goes to a temp name and is renamed when complete.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import humanize
import numpy as np

from common.atomic import atomic_open, atomic_write_bytes
from mixtures.manifest import ShardFile

BUFFER_TOKENS = 1 << 22


@dataclass(frozen=True)
class WriteTask:
    """Documents (part index, start token, length) to copy, in output order, into `out_dir/filename`."""

    out_dir: str
    filename: str
    part_paths: tuple[str, ...]
    dtype: str
    tokenizer_name: str
    part_ids: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray


def shard_file_names(filename: str) -> tuple[str, str, str]:
    """The three files of shard `filename`: tokens, index, metadata."""
    return filename, f"{filename}.index", f"{filename}.metadata"


def write_shard(task: WriteTask) -> ShardFile:
    """Copy the task's documents into the shard, hashing as it goes; return its manifest entry."""
    dtype = np.dtype(task.dtype).newbyteorder("<")
    parts: dict[int, np.ndarray] = {}
    digest = hashlib.sha256()
    buffer = np.empty(BUFFER_TOKENS, dtype=dtype)
    fill = 0
    out_dir = Path(task.out_dir)
    with atomic_open(out_dir / task.filename) as out:

        def flush(data: np.ndarray) -> None:
            view = memoryview(data).cast("B")
            digest.update(view)
            out.write(view)

        for part, start, length in zip(
            task.part_ids.tolist(), task.starts.tolist(), task.lengths.tolist(), strict=True
        ):
            if part not in parts:
                parts[part] = np.memmap(task.part_paths[part], dtype=dtype, mode="r")
            doc = parts[part][start : start + length]
            if fill + length > BUFFER_TOKENS:
                flush(buffer[:fill])
                fill = 0
            if length > BUFFER_TOKENS:
                flush(np.ascontiguousarray(doc))
                continue
            buffer[fill : fill + length] = doc
            fill += length
        flush(buffer[:fill])
    ends = np.cumsum(task.lengths, dtype=np.uint64).astype("<u8")
    tokens = int(ends[-1]) if ends.size else 0
    _, index_name, metadata_name = shard_file_names(task.filename)
    atomic_write_bytes(out_dir / index_name, ends.tobytes())
    token_size = dtype.itemsize
    metadata = f"{task.tokenizer_name}|{token_size}\n{tokens}\n{humanize.metric(tokens, unit='T')}"
    atomic_write_bytes(out_dir / metadata_name, metadata.encode())
    return ShardFile(path=task.filename, tokens=tokens, documents=int(ends.size), sha256=digest.hexdigest())
