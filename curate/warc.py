"""WARC reading that survives what real crawls contain.

datatrove's ``WarcReader`` stops a whole file at the first corrupt gzip member and says nothing about
truncated records. This reader keeps datatrove's decisions for every readable record (same record
types, same MIME test, same UTF-8-then-cchardet decoding, so its documents are byte-identical) and adds:

* every skipped record is counted by reason in the step's stats;
* a corrupt or truncated gzip member is counted, and reading resumes at the next member;
* ``WARC-Truncated`` records are counted (and kept, as FineWeb kept them).
"""

from __future__ import annotations

import io
import sys
import zlib
from collections.abc import Iterator
from typing import IO, Any

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.readers.base import BaseDiskReader
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

GZIP_MAGIC = b"\x1f\x8b\x08"
WARC_MAGIC = b"WARC/"
HTML_TYPES = ("text/html", "application/xhtml+xml")
RESYNC_CHUNK = 1 << 20
MEMBER_CHUNK = 1 << 15
READ_ERRORS = (ArchiveLoadFailed, zlib.error, EOFError, OSError, ValueError, KeyError, IndexError)


def _find_next(f: IO[bytes], start: int, magic: bytes) -> int | None:
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


def iter_gzip_members(f: IO[bytes], on_error: Any = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, decompressed bytes)`` per gzip member, resyncing past broken ones.

    Each member is inflated on its own (CRC checked), so a corrupt member costs only itself:
    warcio's chained reader instead runs a truncated member into the next ones and loses them all.
    """
    pos = 0
    while True:
        f.seek(pos)
        buf = f.read(MEMBER_CHUNK)
        if not buf:
            return
        if not buf.startswith(GZIP_MAGIC):
            if on_error:
                on_error("garbage_bytes", pos, ValueError("no gzip member here"))
            nxt = _find_next(f, pos + 1, GZIP_MAGIC)
            if nxt is None:
                return
            pos = nxt
            continue
        inflater = zlib.decompressobj(31)
        parts: list[bytes] = []
        consumed = 0
        try:
            while True:
                parts.append(inflater.decompress(buf))
                if inflater.eof:
                    consumed += len(buf) - len(inflater.unused_data)
                    break
                consumed += len(buf)
                buf = f.read(MEMBER_CHUNK)
                if not buf:
                    raise EOFError("gzip member cut short by end of file")
        except (zlib.error, EOFError) as err:
            kind = "truncated_member" if isinstance(err, EOFError) else "corrupt_member"
            if on_error:
                on_error(kind, pos, err)
            nxt = _find_next(f, pos + 1, GZIP_MAGIC)
            if nxt is None:
                return
            pos = nxt
            continue
        yield pos, b"".join(parts)
        pos += consumed


def iter_warc_records(f: IO[bytes], on_error: Any = None) -> Iterator[Any]:
    """Yield warcio records; on a broken member call ``on_error(kind, offset, err)`` and go on.

    Compressed files are split into gzip members first (see ``iter_gzip_members``); uncompressed
    files resync at the next ``WARC/`` line after a record that fails to parse.
    """
    head = f.read(3)
    f.seek(0)
    if head == GZIP_MAGIC:
        for offset, member in iter_gzip_members(f, on_error):
            try:
                yield from ArchiveIterator(io.BytesIO(member), check_digests=False)
            except READ_ERRORS as err:
                if on_error:
                    on_error("corrupt_record", offset, err)
        return
    offset = 0
    while True:
        f.seek(offset)
        iterator = ArchiveIterator(f, check_digests=False)
        current = offset
        try:
            for record in iterator:
                current = iterator.get_record_offset()
                yield record
            return
        except READ_ERRORS as err:
            if on_error:
                on_error("corrupt_record", current, err)
            nxt = _find_next(f, current + 1, WARC_MAGIC)
            if nxt is None or nxt <= offset:
                return
            offset = nxt


def _payload_mime(record: Any, content: bytes | None) -> str | None:
    mime = record.rec_headers.get("WARC-Identified-Payload-Type", None) or None
    if mime is not None or content is None:
        return mime
    try:
        import magic

        return magic.from_buffer(content, mime=True)
    except Exception:  # libmagic missing: fall back to the HTTP header
        ctype = record.http_headers.get_header("Content-Type", "") if record.http_headers else ""
        return ctype.split(";")[0].strip().lower() or None


def decode_payload(content: bytes) -> str | None:
    """UTF-8 first, then cchardet's guess: the declared charset is ignored because it is often wrong."""
    import cchardet

    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        detected = cchardet.detect(content)["encoding"]
        if not detected or detected.upper() in ("UTF-8", "UTF8"):
            return None
        try:
            return content.decode(detected)
        except (UnicodeDecodeError, LookupError):
            return None


def record_to_dict(record: Any, stat: Any) -> dict | None:
    """datatrove's ``process_record`` with a counted reason for each record it skips."""
    if record.rec_type not in ("response", "conversion"):
        stat(f"skipped_{record.rec_type}")
        return None
    # ClueWeb09 writes an empty payload type: treat it as missing (datatrove drops such records)
    mime = record.rec_headers.get("WARC-Identified-Payload-Type", None) or None
    if mime is not None and not _is_text(mime, record.rec_type):
        stat("skipped_non_html")
        return None
    content = record.content_stream().read()
    if record.rec_headers.get("WARC-Truncated", None):
        stat("truncated_record")
    if not content:
        stat("skipped_empty")
        return None
    if mime is None:
        mime = _payload_mime(record, content)
        if not mime or not _is_text(mime, record.rec_type):
            stat("skipped_non_html")
            return None
    html = decode_payload(content)
    if html is None:
        stat("skipped_undecodable")
        return None
    headers = record.rec_headers
    url = headers.get("WARC-Target-URI", None) or dict(headers.headers).get("uri")
    date = headers.get("WARC-Date", None) or dict(headers.headers).get("archive-date")
    record_id = headers.get("WARC-Record-ID", None) or f"<{url}|{date}>"
    return {"text": html, "id": record_id, "url": url, "date": date}


def _is_text(mime: str, rec_type: str) -> bool:
    return mime in HTML_TYPES or (rec_type == "conversion" and mime == "text/plain")


class RobustWarcReader(BaseDiskReader):
    """One document per HTML response record, counting every record it does not turn into one."""

    name = "🕷 WARC (robust)"
    type = "📖 - READER"
    _requires_dependencies = ["warcio", ("cchardet", "faust-cchardet")]

    def __init__(self, data_folder: Any, paths_file: Any = None, dump: str | None = None, **kwargs: Any):
        default_metadata = {"dump": dump} if dump else None
        kwargs.setdefault("doc_progress", sys.stderr.isatty())  # a tqdm bar per task, on a terminal only
        super().__init__(data_folder, paths_file, default_metadata=default_metadata, **kwargs)

    def records(self, f: IO[bytes], on_error: Any) -> Iterator[Any]:
        """The file's WARC records (warcio's API); another parser can stand in here (curate/warc_fastwarc.py)."""
        return iter_warc_records(f, on_error)

    def read_file(self, filepath: str) -> DocumentsPipeline:
        def on_error(kind: str, offset: int, err: Exception) -> None:
            self.stat_update(kind)
            from datatrove.utils.logging import logger

            logger.warning(f"{filepath}: {kind} at byte {offset} ({type(err).__name__}: {err}); resyncing")

        with self.data_folder.open(filepath, "rb") as f:
            for ri, record in enumerate(self.records(f, on_error)):
                self.stat_update("records")
                with self.track_time():
                    try:
                        data = record_to_dict(record, self.stat_update)
                    except READ_ERRORS as err:
                        self.stat_update("record_error")
                        from datatrove.utils.logging import logger

                        logger.warning(f"{filepath}: unreadable record #{ri}: {type(err).__name__}: {err}")
                        continue
                    if not data:
                        continue
                    document = self.get_document_from_dict(data, filepath, ri)
                    if not document:
                        continue
                    document.metadata["warc_path"] = filepath
                yield document
