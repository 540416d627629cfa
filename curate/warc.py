"""WARC reading that survives what real crawls contain.

datatrove's ``WarcReader`` stops a whole file at the first corrupt gzip member and says nothing about
truncated records. This reader keeps datatrove's decisions for every readable record (same record
types, same MIME test, same UTF-8-then-cchardet decoding, so its documents are byte-identical) and adds:

* every skipped record is counted by reason in the step's stats (``RECORD_FATES``), and every loss
  of bytes that held no readable record too (``LOSSES``): documents + record fates == ``records``;
* ``.warc.gz``, ``.warc.zst`` and plain ``.warc`` are split into members first
  (``curate/warc_containers.py``): a corrupt or truncated member is counted and reading resumes at
  the next one; garbage before, between or after members is counted and skipped;
* nothing is inflated beyond the caps of ``curate/warc_limits.py`` (decompression bombs, HTTP
  ``Content-Encoding`` bombs): such records are counted ``too_large`` / ``too_large_member``;
* a record without a (non-empty) ``WARC-Target-URI`` is counted ``missing_url``, never a document
  (warcio raises on it, datatrove's URL filter asserts on it);
* ``WARC-Truncated`` records are counted (and kept, as FineWeb kept them).
"""

from __future__ import annotations

import io
import re
import sys
import zlib
from collections.abc import Iterator
from typing import IO, Any

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.readers.base import BaseDiskReader
from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import ChunkedDataReader
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeadersParserException

from common.sandbox import known_utf8
from curate.http_encoding import BodyTooLarge, UndecodableBody, codings, decode_body
from curate.warc_containers import GZIP_MAGIC, iter_members
from curate.warc_limits import DEFAULT_LIMITS, DEFAULT_MAX_HTML_BYTES, ReadLimits

HTML_TYPES = ("text/html", "application/xhtml+xml")
# warcio and the codecs raise all of these on hostile bytes (AttributeError: a record without URI;
# OverflowError: a Content-Length beyond 2**63)
READ_ERRORS = (
    ArchiveLoadFailed,
    StatusAndHeadersParserException,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    TypeError,
)
# one per record that is not a document ("skipped_<type>" for the other record types)
RECORD_FATES = ("skipped_non_html", "skipped_empty", "skipped_undecodable", "record_error", "missing_url", "too_large")
# bytes that held no readable record (see curate/warc_containers.py for the first five)
LOSSES = (
    "garbage_bytes",
    "corrupt_member",
    "truncated_member",
    "too_large_member",
    "empty_file",
    "empty_member",
    "corrupt_record",
)
_URI_HEADER = re.compile(rb"^WARC-Target-URI:[ \t]*[^\s]", re.I | re.M)


def _parse_failure(member: bytes, err: Exception) -> str:
    """``missing_url`` when warcio failed on a record that names no target URI, else ``corrupt_record``."""
    if isinstance(err, AttributeError):
        end = member.find(b"\r\n\r\n")
        if not _URI_HEADER.search(member[: end if end >= 0 else len(member)]):
            return "missing_url"
    return "corrupt_record"


def iter_warc_records(f: IO[bytes], on_error: Any = None, limits: ReadLimits = DEFAULT_LIMITS) -> Iterator[Any]:
    """Yield warcio records; every loss goes to ``on_error(kind, offset, err)`` and reading goes on.

    The file is split into members of at most ``limits.member_bytes`` (see ``iter_members``), each
    parsed by warcio on its own.
    """

    def report(kind: str, offset: int, err: Exception) -> None:
        if on_error:
            on_error(kind, offset, err)

    for offset, member in iter_members(f, limits.member_bytes, report):
        if member[:2] == GZIP_MAGIC[:2]:  # warcio would inflate a nested gzip stream without a cap
            report("corrupt_member", offset, ValueError("gzip inside a member"))
            continue
        if not member.strip():  # warcio would make a record of type None out of blank lines
            report("empty_member", offset, ValueError("member holds no record"))
            continue
        parsed = 0
        try:
            for record in ArchiveIterator(io.BytesIO(member), check_digests=False):
                parsed += 1
                yield record
        except READ_ERRORS as err:
            report(_parse_failure(member, err), offset, err)
            continue
        if not parsed:
            report("empty_member", offset, ValueError("member holds no record"))


ALREADY_DECODED = re.compile(rb"(?:\xef\xbb\xbf)?\s*<")  # markup, not a compressed stream


def _sent_body(record: Any) -> IO[bytes]:
    """The HTTP body as sent, de-chunked, its content codings still applied (a reader's record may say how)."""
    if hasattr(record, "encoded_stream"):
        return record.encoded_stream()
    if record.http_headers.get_header("Transfer-Encoding") == "chunked":
        return ChunkedDataReader(record.raw_stream)  # type: ignore[return-value]
    return record.raw_stream


def read_body(record: Any, max_bytes: int) -> bytes | None:
    """The record's (HTTP-decoded) payload, or None when it is longer than ``max_bytes`` (encoded or decoded).

    The body is read as sent, de-chunked, and its ``Content-Encoding`` undone by ``curate.http_encoding``
    (gzip, x-gzip, deflate, br, zstd, stacked), each stage capped at ``max_bytes``; UndecodableBody when
    it does not decode as its header says.
    """
    header = record.http_headers.get_header("Content-Encoding") if record.http_headers else None
    if not codings(header):
        content = record.content_stream().read(max_bytes + 1)
        return None if len(content) > max_bytes else content
    encoded = _sent_body(record).read(max_bytes + 1)
    if len(encoded) > max_bytes:
        return None
    try:
        return decode_body(encoded, header, max_bytes)
    except BodyTooLarge:
        return None
    except UndecodableBody:
        if ALREADY_DECODED.match(encoded):  # the crawler stored the body decoded and kept the header (ClueWeb09),
            return encoded  # as warcio's reader assumes when the first block does not inflate
        raise


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
    """UTF-8 first, then cchardet's guess: the declared charset is ignored because it is often wrong.

    A page in a 7-bit encoding is valid UTF-8 without being UTF-8: UTF-16 without a byte order mark (every
    other byte NUL; cchardet calls it ASCII) and ISO-2022-JP/KR (escape sequences) were kept as NUL- or
    escape-laden text. Those two signs send such a page to its own decoding."""
    import cchardet

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        # looked for in the bytes (one memchr each; in UTF-8 these bytes encode only these characters): the
        # same answer as in the text, whose search is slower on a page held as 2 or 4 bytes a character
        if b"\x00" not in content and b"\x1b" not in content:
            known_utf8(text, content)  # valid UTF-8 decoded strictly: the extraction hand-over reuses the bytes
            return text
        guess = _bomless_utf16(content) or cchardet.detect(content)["encoding"] or ""
        if not guess.lower().startswith(("utf-16", "iso-2022")):
            return text
        return _decoded(content, guess) or text
    detected = _bomless_utf16(content) or cchardet.detect(content)["encoding"]
    if not detected or detected.upper() in ("UTF-8", "UTF8"):
        return None
    return _decoded(content, detected)


def _decoded(content: bytes, encoding: str) -> str | None:
    try:
        return content.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _bomless_utf16(content: bytes) -> str | None:
    """UTF-16's codec name ("utf-16-le" / "-be") when NULs fill a tenth or more of one byte parity of the page's
    start and four times fewer of the other (markup and Latin text in UTF-16); None otherwise (a binary body's
    NULs fall on both)."""
    head = content[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    half = max(len(head) // 2, 1)
    if odd > 0.1 * half and 4 * even < odd:
        return "utf-16-le"
    if even > 0.1 * half and 4 * odd < even:
        return "utf-16-be"
    return None


def record_to_dict(record: Any, stat: Any, max_body_bytes: int = DEFAULT_LIMITS.body_bytes) -> dict | None:
    """datatrove's ``process_record`` with a counted reason (one of ``RECORD_FATES``) for each record
    it skips; bodies longer than ``max_body_bytes`` are not read past it (``too_large``)."""
    if record.rec_type not in ("response", "conversion"):
        stat(f"skipped_{record.rec_type}")
        return None
    # ClueWeb09 writes an empty payload type: treat it as missing (datatrove drops such records)
    mime = record.rec_headers.get("WARC-Identified-Payload-Type", None) or None
    if mime is not None and not _is_text(mime, record.rec_type):
        stat("skipped_non_html")
        return None
    try:
        content = read_body(record, max_body_bytes)
    except UndecodableBody:
        stat("skipped_undecodable")
        return None
    if record.rec_headers.get("WARC-Truncated", None):
        stat("truncated_record")
    if content is None:
        stat("too_large")
        return None
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
    if not url:  # an empty WARC-Target-URI: datatrove's URL filter would assert on it
        stat("missing_url")
        return None
    record_id = headers.get("WARC-Record-ID", None) or f"<{url}|{date}>"
    return {"text": html, "id": record_id, "url": url, "date": date}


def _is_text(mime: str, rec_type: str) -> bool:
    return mime in HTML_TYPES or (rec_type == "conversion" and mime == "text/plain")


class RobustWarcReader(BaseDiskReader):
    """One document per HTML response record, counting every record it does not turn into one."""

    name = "🕷 WARC (robust)"
    type = "📖 - READER"
    _requires_dependencies = ["warcio", ("cchardet", "faust-cchardet")]

    def __init__(
        self,
        data_folder: Any,
        paths_file: Any = None,
        dump: str | None = None,
        max_html_bytes: int = DEFAULT_MAX_HTML_BYTES,
        **kwargs: Any,
    ):
        self.limits = ReadLimits(max_html_bytes)
        default_metadata = {"dump": dump} if dump else None
        kwargs.setdefault("doc_progress", sys.stderr.isatty())  # a tqdm bar per task, on a terminal only
        super().__init__(data_folder, paths_file, default_metadata=default_metadata, **kwargs)

    def records(self, f: IO[bytes], on_error: Any) -> Iterator[Any]:
        """The file's WARC records (warcio's API); another parser can stand in here (curate/warc_fastwarc.py)."""
        return iter_warc_records(f, on_error, self.limits)

    def read_file(self, filepath: str) -> DocumentsPipeline:
        def on_error(kind: str, offset: int, err: Exception) -> None:
            self.stat_update(*(("records", kind) if kind in RECORD_FATES else (kind,)))
            from datatrove.utils.logging import logger

            logger.warning(f"{filepath}: {kind} at byte {offset} ({type(err).__name__}: {err}); resyncing")

        with self.data_folder.open(filepath, "rb") as f:
            for ri, record in enumerate(self.records(f, on_error)):
                self.stat_update("records")
                with self.track_time():
                    try:
                        data = record_to_dict(record, self.stat_update, self.limits.body_bytes)
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
