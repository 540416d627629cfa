"""Split a WARC file into members, whatever its container, each member costing at most a known size.

A *member* is the unit a container delimits on its own: a gzip member (``.warc.gz``), a zstd frame
(``.warc.zst``), or one record of an uncompressed ``.warc``. Each member is inflated on its own, so a
corrupt or truncated one costs only itself, and reading resumes at the next one. Losses are reported
through ``on_error(kind, offset, err)`` with these kinds:

* ``garbage_bytes``: bytes that start no member (junk before, between or after members);
* ``corrupt_member``: a member that does not inflate (bad deflate/zstd data, CRC mismatch);
* ``truncated_member``: a member cut short by the end of the file;
* ``too_large_member``: a member that inflates beyond ``max_bytes`` (a decompression bomb). It is never
  held in memory: inflation stops at the cap and reading resyncs after the compressed bytes read so far;
* ``empty_file``: a file of zero bytes.

The container is chosen from the first magic found in the file's first MiB, not from its first bytes,
so garbage before the first member is counted and skipped, not mistaken for an uncompressed WARC.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from typing import IO

GZIP_MAGIC = b"\x1f\x8b\x08"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_DICT_MAGIC = b"\x5d\x2a\x4d\x18"  # skippable frame 0x184D2A5D: the warc-zstd dictionary frame
WARC_MAGIC = b"WARC/"
RESYNC_CHUNK = 1 << 20
MEMBER_CHUNK = 1 << 15
ZSTD_FEED = 1 << 12  # zstd output per call is unbounded; 4 KiB of input inflates to at most 128 MiB
HEAD_CHUNK = 1 << 16
HEADER_BLOCK_LIMIT = 1 << 20  # a WARC header block longer than this is not a header block
VERSION_LINE = re.compile(rb"WARC/\d+\.\d+\r\n")  # a record's first line
CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.I | re.M)

OnError = Callable[[str, int, Exception], None]


class MemberTooLarge(ValueError):
    """A member inflates beyond the cap; ``compressed_end`` is where its compressed bytes were left."""

    def __init__(self, limit: int, compressed_end: int):
        super().__init__(f"member inflates beyond {limit} bytes")
        self.compressed_end = compressed_end


def _ignore(kind: str, offset: int, err: Exception) -> None:
    return None


def find_next(f: IO[bytes], start: int, magic: bytes) -> int | None:
    """Offset of the next ``magic`` at or after ``start``, or None at end of file."""
    pos = start
    tail = b""
    while True:
        f.seek(pos)
        chunk = f.read(RESYNC_CHUNK)
        if not chunk:
            return None
        buf = tail + chunk
        idx = buf.find(magic)
        if idx >= 0:
            return pos - len(tail) + idx
        tail = buf[-(len(magic) - 1) :]
        pos += len(chunk)


def _plausible(kind: str, head: bytes, idx: int) -> bool:
    """Does the magic at ``idx`` start a member (not bytes of junk that happen to match)?"""
    if kind == "plain":
        return bool(VERSION_LINE.match(head, idx))
    if kind == "gzip":
        try:
            zlib.decompressobj(31).decompress(head[idx : idx + 4096], 1)
        except zlib.error:
            return False
        return head[idx + 3] < 0x20 if len(head) > idx + 3 else True
    if head.startswith(ZSTD_DICT_MAGIC, idx):  # 4 junk bytes can spell it: its frame must end in a zstd frame
        after = idx + 8 + int.from_bytes(head[idx + 4 : idx + 8], "little")
        if after + len(ZSTD_MAGIC) <= len(head):
            return head.startswith(ZSTD_MAGIC, after)
        return len(head) == RESYNC_CHUNK  # it ends past the first MiB: cannot tell, unless the file ended
    return True


def sniff(f: IO[bytes]) -> tuple[str | None, int]:
    """``(container, offset of its first member)``: ``gzip``, ``zstd``, ``plain`` or None when the
    file's first MiB holds no plausible member start (``empty`` for a zero-byte file)."""
    f.seek(0)
    head = f.read(RESYNC_CHUNK)
    if not head:
        return "empty", 0
    found = []
    for magic, kind in ((GZIP_MAGIC, "gzip"), (ZSTD_MAGIC, "zstd"), (ZSTD_DICT_MAGIC, "zstd"), (WARC_MAGIC, "plain")):
        idx = head.find(magic)
        while idx >= 0 and not _plausible(kind, head, idx):
            idx = head.find(magic, idx + 1)
        if idx >= 0:
            found.append((idx, kind))
    if not found:
        return None, 0
    idx, kind = min(found)
    return kind, idx


def iter_members(f: IO[bytes], max_bytes: int, on_error: OnError | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, inflated bytes)`` per member of any container; losses go to ``on_error``."""
    on_error = on_error or _ignore
    kind, start = sniff(f)
    if kind == "empty":
        on_error("empty_file", 0, ValueError("empty file"))
        return
    if kind is None:
        on_error("garbage_bytes", 0, ValueError("no gzip, zstd or WARC/ magic in the first MiB"))
        return
    if start and kind == "gzip":
        _count_gzip_garbage(f, 0, start, max_bytes, on_error, f"{start} bytes before the first gzip member")
    elif start:
        on_error("garbage_bytes", 0, ValueError(f"{start} bytes before the first {kind} member"))
    if kind == "gzip":
        yield from iter_gzip_members(f, max_bytes, on_error, start)
    elif kind == "zstd":
        yield from iter_zstd_frames(f, max_bytes, on_error, start)
    else:
        yield from iter_plain_records(f, max_bytes, on_error, start)


def _inflate_gzip(f: IO[bytes], pos: int, max_bytes: int) -> tuple[bytes, int]:
    """One gzip member at ``pos`` (CRC checked), at most ``max_bytes`` out: ``(data, end offset)``."""
    f.seek(pos)
    inflater = zlib.decompressobj(31)
    parts: list[bytes] = []
    size = 0
    read = 0
    data = b""
    while True:
        if not data:
            data = f.read(MEMBER_CHUNK)
            if not data:
                raise EOFError("gzip member cut short by end of file")
            read += len(data)
        out = inflater.decompress(data, max_bytes + 1 - size)  # max_length >= 1: 0 would mean no limit
        size += len(out)
        if size > max_bytes:
            raise MemberTooLarge(max_bytes, pos + read - len(inflater.unconsumed_tail))
        parts.append(out)
        if inflater.eof:
            return b"".join(parts), pos + read - len(inflater.unused_data)
        data = inflater.unconsumed_tail


def _deflate_end(f: IO[bytes], pos: int, max_bytes: int) -> int | None:
    """Where a gzip member whose CRC or length check failed ends: a raw inflate ignores the trailer.
    None when its deflate data is itself broken or its header carries optional fields."""
    f.seek(pos)
    header = f.read(10)
    if len(header) < 10 or header[3] != 0:
        return None
    inflater = zlib.decompressobj(-15)
    read, size, data = 10, 0, b""
    try:
        while not inflater.eof:
            if not data:
                data = f.read(MEMBER_CHUNK)
                if not data:
                    return None
                read += len(data)
            size += len(inflater.decompress(data, MEMBER_CHUNK))
            if size > max_bytes:
                return None
            data = inflater.unconsumed_tail
    except zlib.error:
        return None
    return pos + read - len(inflater.unused_data) + 8


def _count_gap(f: IO[bytes], pos: int, nxt: int | None, max_bytes: int, on_error: OnError) -> None:
    """After a corrupt member at ``pos``, count the bytes between its real end and the next magic
    (``nxt``) as ``garbage_bytes``: they held a member whose own magic was destroyed."""
    end = _deflate_end(f, pos, max_bytes)
    if end is None or (nxt is not None and end >= nxt):
        return
    f.seek(end)
    if f.read(1):
        on_error("garbage_bytes", end, ValueError("bytes after a corrupt member start no member"))


# a gzip member's first four bytes with one of its three magic bytes destroyed and no optional header fields
DESTROYED_HEADER = re.compile(rb"(?s)(?=(?:.\x8b\x08|\x1f.\x08|\x1f\x8b.)\x00)")
GARBAGE_SCAN = 1 << 24  # bytes of one garbage stretch searched for such members; the rest counts as junk
GARBAGE_TRIES = 64  # header-like spots tried per stretch: hostile junk full of them stays linear


def _count_gzip_garbage(f: IO[bytes], pos: int, nxt: int | None, max_bytes: int, on_error: OnError, why: str) -> None:
    """Bytes from ``pos`` to the next magic (``nxt``, None: end of file) that start no member: each gzip
    member in them whose magic alone was destroyed (its header and deflate data still parse) is one
    ``garbage_bytes`` loss, so two such members in a row count two lost members, not one; each stretch of
    other bytes before, between or after them (junk, a member broken inside) counts once more. Such a member
    is looked for at every header-like spot, not only at ``pos``: junk before it (a prefix) must not hide it."""
    f.seek(0, 2)
    stop = f.tell() if nxt is None else nxt
    f.seek(pos)
    region = f.read(min(stop - pos, GARBAGE_SCAN))
    spots = [pos] + [pos + m.start() for m in DESTROYED_HEADER.finditer(region, 1)][: GARBAGE_TRIES - 1]
    here = pos
    for spot in spots:
        if spot < here or (end := _deflate_end(f, spot, max_bytes)) is None or end > stop:
            continue
        if spot > here:  # the junk before this member
            on_error("garbage_bytes", here, ValueError(why))
        on_error("garbage_bytes", spot, ValueError(f"{why}: a gzip member with destroyed magic bytes"))
        here = end
    if here < stop:
        on_error("garbage_bytes", here, ValueError(why))


def _iter_compressed(
    f: IO[bytes],
    pos: int,
    magic: bytes,
    inflate: Callable[[int], tuple[bytes, int]],
    errors: tuple[type[Exception], ...],
    on_error: OnError,
    skip: Callable[[int, bytes], int | None] | None = None,
    on_corrupt: Callable[[int, int | None], None] | None = None,
    on_garbage: Callable[[int, int | None], None] | None = None,
) -> Iterator[tuple[int, bytes]]:
    """The loop the compressed containers share: inflate the member at ``pos``; on garbage, a
    broken or an oversized member, count it and resync at the next ``magic``."""
    while True:
        f.seek(pos)
        head = f.read(len(magic))
        if not head:
            return
        if skip and (skipped := skip(pos, head)) is not None:
            pos = skipped
            continue
        if head != magic:
            resume = pos + 1
            if on_garbage:
                on_garbage(pos, find_next(f, resume, magic))
            else:
                on_error("garbage_bytes", pos, ValueError("no member starts here"))
        else:
            try:
                member, end = inflate(pos)
            except MemberTooLarge as err:
                on_error("too_large_member", pos, err)
                resume = err.compressed_end
            except errors as err:
                truncated = isinstance(err, EOFError)
                on_error("truncated_member" if truncated else "corrupt_member", pos, err)
                resume = pos + 1
                if on_corrupt and not truncated:
                    on_corrupt(pos, find_next(f, resume, magic))
            else:
                yield pos, member
                pos = end
                continue
        nxt = find_next(f, resume, magic)
        if nxt is None:
            return
        pos = nxt


def iter_gzip_members(
    f: IO[bytes], max_bytes: int, on_error: OnError | None = None, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, decompressed bytes)`` per gzip member, resyncing past broken ones.

    warcio's chained reader instead runs a truncated member into the next ones and loses them all.
    """
    report = on_error or _ignore
    yield from _iter_compressed(
        f,
        start,
        GZIP_MAGIC,
        lambda pos: _inflate_gzip(f, pos, max_bytes),
        (zlib.error, EOFError),
        report,
        on_corrupt=lambda pos, nxt: _count_gap(f, pos, nxt, max_bytes, report),
        on_garbage=lambda pos, nxt: _count_gzip_garbage(f, pos, nxt, max_bytes, report, "no member starts here"),
    )


def _zstd_decompressor(f: IO[bytes], pos: int, on_error: OnError) -> tuple[object, int]:
    """The decompressor for a warc-zstd file and where its first data frame starts (after the
    optional dictionary frame, which may itself be zstd-compressed)."""
    import zstandard

    f.seek(pos)
    if f.read(4) != ZSTD_DICT_MAGIC:
        return zstandard.ZstdDecompressor(), pos
    size = int.from_bytes(f.read(4), "little")
    raw = f.read(min(size, HEADER_BLOCK_LIMIT * 64))
    try:
        if raw.startswith(ZSTD_MAGIC):
            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        dictionary = zstandard.ZstdCompressionDict(raw)
        return zstandard.ZstdDecompressor(dict_data=dictionary), pos + 8 + size
    except zstandard.ZstdError as err:
        on_error("corrupt_member", pos, err)
        return zstandard.ZstdDecompressor(), pos + 8 + size


def _inflate_zstd(decompressor: object, f: IO[bytes], pos: int, max_bytes: int) -> tuple[bytes, int]:
    """One zstd frame at ``pos``, at most ``max_bytes`` out (fed in small pieces to bound each call)."""
    inflater = decompressor.decompressobj()  # type: ignore[attr-defined]
    parts: list[bytes] = []
    size = 0
    read = 0
    f.seek(pos)
    while True:
        data = f.read(ZSTD_FEED)
        if not data:
            raise EOFError("zstd frame cut short by end of file")
        read += len(data)
        out = inflater.decompress(data)
        size += len(out)
        if size > max_bytes:
            raise MemberTooLarge(max_bytes, pos + read)
        parts.append(out)
        if inflater.eof:
            return b"".join(parts), pos + read - len(inflater.unused_data)


def iter_zstd_frames(
    f: IO[bytes], max_bytes: int, on_error: OnError | None = None, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, decompressed bytes)`` per zstd frame (the warc-zstd layout: one record per
    frame, an optional dictionary first), resyncing at the next frame magic past broken ones."""
    import zstandard

    report = on_error or _ignore
    decompressor, pos = _zstd_decompressor(f, start, report)

    def skippable(at: int, head: bytes) -> int | None:  # e.g. a seek table: skipped, not garbage
        if len(head) == 4 and head[1:] == ZSTD_DICT_MAGIC[1:] and 0x50 <= head[0] <= 0x5F:
            return at + 8 + int.from_bytes(f.read(4), "little")
        return None

    yield from _iter_compressed(
        f,
        pos,
        ZSTD_MAGIC,
        lambda at: _inflate_zstd(decompressor, f, at, max_bytes),
        (zstandard.ZstdError, EOFError),
        report,
        skip=skippable,
    )


def _next_record_start(f: IO[bytes], start: int) -> int | None:
    """Offset of the next ``WARC/`` at the start of a line, at or after ``start``."""
    nxt = find_next(f, max(start - 1, 0), b"\nWARC/")
    return None if nxt is None else nxt + 1


def _content_length(header: bytes) -> int | None:
    """The declared Content-Length, or None when missing, not a number, or too long to be one."""
    match = CONTENT_LENGTH.search(header)
    if not match or not match.group(1).isdigit() or len(match.group(1)) > 18:
        return None
    return int(match.group(1))


def _declared_end(f: IO[bytes], pos: int, header: bytes) -> int | None:
    """End of a plain record per its Content-Length, if the bytes there close it (CRLF CRLF, then the
    next record or the end of the file); None when the length is missing, unreadable or a lie."""
    length = _content_length(header)
    if length is None:
        return None
    end = pos + len(header) + length
    f.seek(end)
    after = f.read(4 + 64)
    rest = after[4:].lstrip(b"\r\n")
    if after[:4] != b"\r\n\r\n" or not (rest.startswith(WARC_MAGIC) or (not rest and len(after) < 68)):
        return None
    return end + 4


def _read_head(f: IO[bytes], pos: int) -> bytes:
    """The bytes at ``pos``, enough to hold a header block (64 KiB, up to 1 MiB when needed)."""
    f.seek(pos)
    head = f.read(HEAD_CHUNK)
    if len(head) == HEAD_CHUNK and b"\r\n\r\n" not in head:
        f.seek(pos)
        head = f.read(HEADER_BLOCK_LIMIT)
    return head


def iter_plain_records(
    f: IO[bytes], max_bytes: int, on_error: OnError | None = None, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, bytes)`` per record of an uncompressed WARC.

    A record ends where its Content-Length says when the bytes there close it; when the length is
    missing or a lie, it ends at the next line starting with ``WARC/`` (searched from the end of its
    header block, so a too-long length cannot swallow the records after it). A record cut inside its
    header block (by the end of the file: ``truncated_member``; by the next record's version line:
    ``corrupt_member``) or inside its declared content by the end of the file is lost, and counted.
    """
    on_error = on_error or _ignore
    pos = start
    while True:
        head = _read_head(f, pos)
        blank = len(head) - len(head.lstrip(b"\r\n"))
        if blank == len(head):
            return
        pos += blank
        head = head[blank:]
        if not head.startswith(WARC_MAGIC):
            on_error("garbage_bytes", pos, ValueError("no WARC record here"))
            if (pos := _next_record_start(f, pos + 1)) is None:
                return
            continue
        cut = head.find(b"\r\n\r\n")
        inner = VERSION_LINE.search(head, 1, cut if cut >= 0 else len(head))
        if inner:
            on_error("corrupt_member", pos, ValueError("WARC header block cut by the next record"))
            pos += inner.start()
            continue
        if cut < 0:
            if len(head) < HEADER_BLOCK_LIMIT:
                on_error("truncated_member", pos, EOFError("WARC header block cut by end of file"))
                return
            on_error("corrupt_member", pos, ValueError("WARC header block without its end"))
            if (pos := _next_record_start(f, pos + 1)) is None:
                return
            continue
        header = head[: cut + 4]
        end = _declared_end(f, pos, header)
        if end is None:
            end = _next_record_start(f, pos + len(header))
        if end is None:
            f.seek(0, 2)
            end = f.tell()
            length = _content_length(header)
            if length is not None and pos + len(header) + length > end:
                on_error("truncated_member", pos, EOFError("WARC record cut short by end of file"))
                return
        if end - pos > max_bytes:
            on_error("too_large_member", pos, MemberTooLarge(max_bytes, end))
        else:
            f.seek(pos)
            yield pos, f.read(end - pos)
        pos = end
