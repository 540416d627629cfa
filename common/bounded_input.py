"""Reading a user's file with bounds: only a regular file, at most so many bytes (after decompression).

A FIFO given as a source blocks a reader forever, a 3 MB gzip bomb given as an eval set decompressed to
7.7 GiB of memory, and a 100 MB recipe took 10 GiB to parse (all seen in the audit of issue 30). Config
and task files are small by nature, so every reader of one opens it here: a path that is not a regular
file is refused at once (opened non-blocking, checked with fstat, so a FIFO never blocks), and a read
past the limit raises instead of growing. The errors are OSErrors, which every reader already turns
into its one-line error naming the file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import pyarrow as pa

MAX_CONFIG_BYTES = 1 << 20  # a recipe, mixture spec, ablation spec or model YAML: the bundled ones are < 10 KB
MAX_DATA_BYTES = 512 << 20  # an eval set or task file, decompressed: BLiMP's 67 sets are 24 MB


class InputRefused(OSError):
    """A file this process will not read (not a regular file, larger than its limit); one line."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for binary reading when it is a regular file (or a link to one), else InputRefused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, without a writer
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise InputRefused(f"{path} is {kind}; only regular files are read")
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _Capped(io.RawIOBase):
    """Bytes of `inner`, raising InputRefused once more than `limit` have been read."""

    def __init__(self, inner: BinaryIO, limit: int, what: str, owned: tuple[BinaryIO, ...]) -> None:
        self.inner, self.limit, self.what, self.owned, self.total = inner, limit, what, owned, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        n = self.inner.readinto(buffer)  # type: ignore[attr-defined]
        self.total += n or 0
        if self.total > self.limit:
            raise InputRefused(f"{self.what} holds more than {self.limit:,} bytes; refused (the limit for this input)")
        return n

    def close(self) -> None:
        for handle in self.owned:
            handle.close()
        super().close()


def _open_with_size(path: str | os.PathLike[str]) -> tuple[BinaryIO, int]:
    """A local regular file (`open_regular`) or an object on a store (a UPath: no FIFOs there), and its size."""
    if isinstance(path, (str, bytes, os.PathLike)):
        raw = open_regular(path)
        return raw, os.fstat(raw.fileno()).st_size
    handle = path.open("rb")  # type: ignore[attr-defined]
    size = getattr(handle, "size", None)  # fsspec's file knows it from its open (on a store a stat is a HEAD more)
    return handle, size if isinstance(size, int) else path.stat().st_size  # type: ignore[attr-defined]


def open_bounded(path: str | os.PathLike[str], limit: int = MAX_DATA_BYTES) -> BinaryIO:
    """A regular file (or an object on a store) for reading at most `limit` bytes, decompressed when its
    name ends in ``.gz``."""
    raw, size = _open_with_size(path)
    if str(path).endswith(".gz"):
        inner: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        what, owned = f"{path} (decompressed)", (inner, raw)
    else:
        if size > limit:  # known before reading: a (sparse) 3 GiB file is refused at once, not read to the cap
            raw.close()
            raise InputRefused(f"{path} holds {size:,} bytes, more than {limit:,}; refused (the limit for this input)")
        inner, what, owned = raw, str(path), (raw,)
    return io.BufferedReader(_Capped(inner, limit, what, owned))  # type: ignore[return-value]


def read_bounded(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The whole of a small file (`open_bounded`'s rules)."""
    with open_bounded(path, limit) as handle:
        return handle.read()


def loads_json(data: bytes | str, what: object) -> Any:
    """`json.loads`, with the RecursionError of deeply nested input (100,000 `[`, a few hundred KB) turned into
    a ValueError naming `what`, as every other malformed JSON is: it was a traceback in each reader."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{what}: JSON nested too deeply") from None


def read_json_bounded(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> Any:
    """A small JSON file (a model's config.json, a checkpoint's manifest or state): `read_bounded`'s rules (a
    sparse 3 GiB config.json took 4.8 GiB of memory), `loads_json`'s errors (OSError or ValueError)."""
    return loads_json(read_bounded(path, limit), path)


def read_parquet_bounded(
    path: str | os.PathLike[str], columns: list[str] | None = None, limit: int = MAX_DATA_BYTES
) -> pa.Table:
    """The rows of a parquet task or eval file, refused (InputRefused) once their decoded size passes `limit`.

    A parquet file is compressed twice over: its pages (zstd, gzip, ...) and its values (a dictionary page
    holds each distinct string once, the rows only its index), so a file of kilobytes can decode to
    gigabytes. Both are counted before they are paid for: the page sizes the footer declares, then, batch
    by batch, the bytes the rows would take once their dictionary is expanded (computed from the indices,
    without expanding them); a batch is decoded only when the total stays within `limit`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_regular(path) as handle:
        meta = pq.ParquetFile(handle)
        wanted = set(meta.schema_arrow.names if columns is None else columns)
        declared = sum(
            chunk.total_uncompressed_size
            for group in range(meta.metadata.num_row_groups)
            for chunk in (meta.metadata.row_group(group).column(i) for i in range(meta.metadata.num_columns))
            if chunk.path_in_schema.split(".")[0] in wanted
        )
        if declared > limit:
            raise InputRefused(f"{path} (decompressed) holds {declared:,} bytes, more than {limit:,}; refused")
        texts = [f.name for f in meta.schema_arrow if f.name in wanted and _is_text(f.type)]
        handle.seek(0)
        parquet = pq.ParquetFile(handle, read_dictionary=texts)  # strings stay dictionary-encoded until counted
        total, batches = 0, []
        for batch in parquet.iter_batches(batch_size=1024, columns=columns):
            total += sum(_decoded_bytes(column) for column in batch.columns)
            if total > limit:
                raise InputRefused(
                    f"{path} (decoded) holds more than {limit:,} bytes; refused (the limit for this input)"
                )
            batches.append(pa.RecordBatch.from_arrays([_decoded(c) for c in batch.columns], names=batch.schema.names))
        if batches:
            return pa.Table.from_batches(batches)
        fields = [parquet.schema_arrow.field(name) for name in (columns or parquet.schema_arrow.names)]
        return pa.schema(
            [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in fields]
        ).empty_table()


BOMB_RATIO = 200  # decoded text per byte on disk above which a document file is a bomb (zstd text: ~4-5)


def refuse_parquet_bomb(handle: BinaryIO, name: str, column: str, size: int, floor: int = MAX_DATA_BYTES) -> None:
    """Refuse (InputRefused) a document file whose `column` decodes to more than max(floor, BOMB_RATIO x
    its size on disk): an 824-byte file of 20,000 rows pointing at one dictionary entry of 1 MB decodes to
    20 GB, and the dedup, tokenizer and mixture readers, which stream documents in batches, took minutes
    and 1.3 to 6.4 GiB on it.

    First a bound read from the file's footer and dictionary pages alone (`_chunk_bound`, a few KB read
    per row group): values of plain pages take the bytes the footer declares, each value of a dictionary
    page at most its longest entry. Only when that bound passes the budget are the dictionary row groups
    counted exactly, by their indices, without expanding them (`_decoded_bytes`): that pass has pyarrow
    hash every plain value into a dictionary, ~3x a plain read of the column (1.4 s against 0.43 s for a
    73 MB file of 150 MB of text, where the bound takes ~0.01 s: bench/parquet_bomb_check.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    budget = max(floor, BOMB_RATIO * size)
    meta = pq.ParquetFile(handle)
    index = meta.schema_arrow.get_field_index(column)
    if index < 0:
        return  # the caller names a missing column in its own words
    kind = meta.schema_arrow.field(column).type
    text = _is_text(kind.value_type if pa.types.is_dictionary(kind) else kind)
    total, bound, with_dictionary = 0, 0, []
    for group in range(meta.metadata.num_row_groups):
        chunk = next(c for c in (meta.metadata.row_group(group).column(i) for i in range(meta.metadata.num_columns))
                     if c.path_in_schema.split(".")[0] == column)  # fmt: skip
        if chunk.has_dictionary_page and text:
            with_dictionary.append(group)
            bound += _chunk_bound(handle, chunk, budget)
        else:
            total += chunk.total_uncompressed_size
    if with_dictionary and total + bound > budget:  # the bound does not clear it: count exactly
        total += decoded_dictionary_bytes(handle, column, with_dictionary, budget - total)
    if total > budget:
        raise InputRefused(
            f"{name}: its `{column}` column decodes to more than {budget:,} bytes from {size:,} on disk "
            f"(over {BOMB_RATIO}x); refused as a decompression bomb"
        )


def decoded_dictionary_bytes(
    handle: BinaryIO, column: str, groups: list[int], stop_above: int, per_value: int = 8
) -> int:
    """The bytes `column` of row `groups` decodes to, counted by dictionary indices without expanding them
    (stops once past `stop_above`): exact, but pyarrow hashes every plain value into a dictionary on the way.
    `per_value`: bytes counted per value beside its own (an Arrow string's offset; 0: the text alone)."""
    import pyarrow.parquet as pq

    handle.seek(0)
    parquet = pq.ParquetFile(handle, read_dictionary=[column])
    total = 0
    for batch in parquet.iter_batches(batch_size=1024, row_groups=groups, columns=[column]):
        total += _decoded_bytes(batch.column(0), per_value)
        if total > stop_above:
            break
    return total


# pyarrow names LZ4_RAW "LZ4"; a Hadoop-framed LZ4 page does not decode as a raw block and is counted exactly
_CODECS = {"UNCOMPRESSED": None, "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "ZSTD": "zstd",
           "LZ4_RAW": "lz4_raw", "LZ4": "lz4_raw"}  # fmt: skip
_DICTIONARY_PAGE = 2  # parquet.thrift PageType


def _chunk_bound(handle: BinaryIO, chunk: Any, budget: int) -> int:
    """An upper bound on the bytes a text column chunk with a dictionary page decodes to: the chunk's declared
    uncompressed size (which holds every plain value whole) plus, for each value, the longest entry of its
    dictionary page (which every dictionary-encoded value is one of). `budget + 1` when the page cannot be
    read cheaply (an unknown codec, a header it does not parse, a page over the budget): count exactly."""
    import pyarrow as pa

    codec = _CODECS.get(chunk.compression, "unknown")
    try:
        handle.seek(chunk.dictionary_page_offset)
        head = handle.read(256)
        kind, raw_size, stored_size, entries, length = _dictionary_page_header(head)
        if kind != _DICTIONARY_PAGE or codec == "unknown" or raw_size > budget or stored_size > budget:
            return budget + 1
        handle.seek(chunk.dictionary_page_offset + length)
        page = handle.read(stored_size)
        plain = page if codec is None else pa.decompress(page, raw_size, codec=codec, asbytes=True)
        if len(plain) != raw_size:
            return budget + 1
        longest = _longest_plain_value(plain, entries)
    except (ValueError, TypeError, OSError, pa.ArrowException):  # TypeError: a footer without the page's offset
        return budget + 1
    return chunk.total_uncompressed_size + chunk.num_values * longest


def _longest_plain_value(page: bytes, entries: int) -> int:
    """The longest of the `entries` PLAIN byte arrays (4-byte little-endian length, then the bytes) of `page`."""
    longest, at = 0, 0
    for _ in range(entries):
        if at + 4 > len(page):
            raise ValueError("dictionary page shorter than its entries")
        length = int.from_bytes(page[at : at + 4], "little")
        longest, at = max(longest, length), at + 4 + length
    if at > len(page):
        raise ValueError("dictionary page shorter than its entries")
    return longest


def _dictionary_page_header(data: bytes) -> tuple[int, int, int, int, int]:
    """(page type, uncompressed size, compressed size, dictionary entries, header length) of the thrift
    compact-protocol PageHeader at the start of `data` (parquet.thrift); ValueError if it does not parse."""
    reader = _Compact(data)
    found: dict[int, int] = {}
    for field, kind in reader.fields():
        if field in (1, 2, 3) and kind == 5:  # type, uncompressed_page_size, compressed_page_size: i32
            found[field] = reader.varint_signed()
        elif field == 7 and kind == 12:  # dictionary_page_header: struct, num_values its field 1 (i32)
            for inner, inner_kind in reader.fields():
                if inner == 1 and inner_kind == 5:
                    found[7] = reader.varint_signed()
                else:
                    reader.skip(inner_kind)
        else:
            reader.skip(kind)
    if set(found) != {1, 2, 3, 7} or min(found.values()) < 0:
        raise ValueError("not a dictionary page header")
    return found[1], found[2], found[3], found[7], reader.at


class _Compact:
    """Just enough of thrift's compact protocol to read a page header and skip what it does not need."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise ValueError("truncated header")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def varint_signed(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)  # zigzag

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of a struct's fields up to its stop byte; the caller reads or skips each value."""
        last = 0
        while (b := self.byte()) != 0:
            last = last + (b >> 4) if b >> 4 else self.varint_signed()
            yield last, b & 0x0F

    def count(self, count: int) -> int:
        """A list's or map's element count, refused beyond the bytes left (every element takes >= 1 byte):
        a planted count of 2**60 would otherwise loop for good."""
        if count > len(self.data) - self.at:
            raise ValueError("a count beyond the header")
        return count

    def skip(self, kind: int, in_container: bool = False) -> None:
        if kind in (1, 2):  # a field's boolean lives in its type nibble; an element's takes a byte
            if in_container:
                self.byte()
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.at += 8
        elif kind == 8:
            self.at += self.count(self.varint())
        elif kind in (9, 10):
            head = self.byte()
            count = self.count(head >> 4 if head >> 4 != 15 else self.varint())
            for _ in range(count):
                self.skip(head & 0x0F, in_container=True)
        elif kind == 11:
            count = self.count(self.varint())
            types = self.byte() if count else 0
            for _ in range(count):
                self.skip(types >> 4, in_container=True)
                self.skip(types & 0x0F, in_container=True)
        elif kind == 12:
            for _, inner in self.fields():
                self.skip(inner)
        else:
            raise ValueError(f"unknown thrift type {kind}")


def _is_text(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _decoded_bytes(column: pa.Array, per_value: int = 8) -> int:
    """The bytes `column` takes once decoded: a dictionary column's values are counted per row, unexpanded
    (each with `per_value` bytes of offset)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        return column.nbytes
    lengths = pc.binary_length(column.dictionary)
    return int(pc.sum(pc.take(lengths, column.indices)).as_py() or 0) + per_value * len(column)


def _decoded(column: pa.Array) -> pa.Array:
    import pyarrow as pa

    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column
