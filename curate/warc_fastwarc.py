"""fastwarc as an optional WARC reader: the same documents as ``RobustWarcReader``, parsed in C++.

Why: warcio's pure-Python parsing is a visible share of the curate stage once extraction is cheap
(resiliparse); fastwarc (Resiliparse's WARC library, datatrove issue #182) reads the same records
several times faster. ``FastWarcReader`` is ``RobustWarcReader`` with another ``records`` source:
each fastwarc record is wrapped in the small part of warcio's record API that
``curate.warc.record_to_dict`` reads, so MIME rules, decoding (UTF-8, then cchardet), skip reasons,
ids and counters are the robust reader's own, not a second copy.

On the real sample WARCs (``shared/data/warc_samples``) both readers give the same documents
(id, url, date, text) on 7 of 9 files, including Common Crawl's. Differences that stay, so use the
robust reader for old or damaged crawls:

* a corrupt gzip member or a broken record: ``RobustWarcReader`` inflates members one by one and
  resyncs after a bad one; fastwarc stops the file there (counted as ``corrupt_stream``);
* a payload declared ``Transfer-Encoding: chunked`` that is not chunked (pywb's 2014 sample):
  warcio falls back to the raw body, fastwarc raises (the file stops, as above);
* WARC/0.18 (ClueWeb09): fastwarc splits HTTP headers from the body elsewhere, so the text differs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from curate.warc import RobustWarcReader


class _Headers:
    """warcio's ``StatusAndHeaders`` surface over a fastwarc ``HeaderMap``."""

    def __init__(self, headers: Any) -> None:
        self._headers = headers
        self.headers = headers.astuples()

    def get(self, name: str, default: Any = None) -> Any:
        value = self._headers.get(name)
        if value is None:
            return default
        if name == "WARC-Target-URI" and value.startswith("<") and value.endswith(">"):
            value = value[1:-1]  # wget writes <uri> (WARC/1.0's grammar); warcio strips the brackets too
        return value

    def get_header(self, name: str, default: Any = None) -> Any:
        return self.get(name, default)


class _Payload:
    def __init__(self, record: Any) -> None:
        self._record = record

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all when negative): the reader stops at its cap (``warc.read_body``).

        A body its record's length already keeps within ``size`` is read whole, the same bytes: fastwarc's
        ``read(size)`` sets ``size`` bytes aside (40 MB at the default cap) and page-faults in the part it
        fills, in fresh memory for every record (0.46 against 0.25 CPU s to read ``bench.curate``'s pages WARC).
        ``content_length`` is what is left of the record after its HTTP headers; undoing the transfer coding
        only shortens it."""
        if 0 <= size and self._record.content_length <= size:
            size = -1
        return self._record.reader.read(size)


class FastWarcRecord:
    """A fastwarc record seen through the warcio attributes ``record_to_dict`` uses."""

    def __init__(self, record: Any) -> None:
        self._record = record
        self.rec_type = str(record.record_type)
        self.rec_headers = _Headers(record.headers)
        self.http_headers = _Headers(record.http_headers) if record.is_http else None

    def content_stream(self) -> _Payload:
        return _Payload(self._record)

    def encoded_stream(self) -> _Payload:
        """The body with its content codings still applied: ``curate.http_encoding`` undoes them, as for
        warcio's records (fastwarc is asked to undo the transfer coding only)."""
        return _Payload(self._record)


class FastWarcReader(RobustWarcReader):
    """One document per HTML response record, read with fastwarc (HTTP payloads de-chunked; their content
    codings undone by ``curate.http_encoding``, as for the robust reader)."""

    name = "🕷 WARC (fastwarc)"
    _requires_dependencies = ["fastwarc"]

    def records(self, f: IO[bytes], on_error: Any) -> Iterator[FastWarcRecord]:
        """fastwarc's records until the end, or until the stream cannot be parsed further."""
        from fastwarc.warc import ArchiveIterator

        records = iter(ArchiveIterator(f, parse_http=True, auto_decode="transfer", fsspec_args=False))
        position = 0
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            except Exception as err:  # fastwarc raises on a stream it cannot parse further
                on_error("corrupt_stream", position, err)
                return
            position = record.stream_pos
            yield FastWarcRecord(record)


def count_responses(path: str) -> int:
    """Response records (captured pages) in one WARC file, headers only: the unit of a curation plan
    (``pipelines.plan``); fastwarc skips the bodies, so a 1 GB WARC counts in seconds."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with open(path, "rb") as f:
        return sum(1 for _ in ArchiveIterator(f, record_types=WarcRecordType.response, parse_http=False))
