"""Valid pages in every ``Content-Encoding`` a crawler meets are read (issue 30), encoded here with the real
encoders (zlib, brotli, zstandard). Before, every ``br`` record ended as ``record_error`` (warcio's brotli
path breaks with brotli 1.2), and ``x-gzip``, ``zstd`` and stacked codings as ``skipped_undecodable``."""

from __future__ import annotations

import gzip
import io
import zlib
from collections import Counter
from pathlib import Path

import brotli
import pytest
import zstandard
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from curate.http_encoding import BodyTooLarge, UndecodableBody, decode_body
from curate.warc import RobustWarcReader

HTML = ("<html><head><title>Library</title></head><body><article><p>The committee met on Tuesday to discuss "
        "the new library; the building opens before the end of the year.</p></article></body></html>")  # fmt: skip


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


ENCODED = {  # Content-Encoding -> body as a server sends it
    "gzip": gzip.compress(HTML.encode()),
    "x-gzip": gzip.compress(HTML.encode()),
    "deflate": zlib.compress(HTML.encode()),
    "Deflate": _raw_deflate(HTML.encode()),  # raw deflate, as many servers send it; header case varies
    "br": brotli.compress(HTML.encode()),
    "zstd": zstandard.ZstdCompressor().compress(HTML.encode()),
    "gzip, gzip": gzip.compress(gzip.compress(HTML.encode())),
    "gzip, br": brotli.compress(gzip.compress(HTML.encode())),
    "identity": HTML.encode(),
}
BROKEN = {
    "br": b"not brotli at all",
    "zstd": b"\x28\xb5\x2f\xfd garbage",
    "compress": b"LZW",
    "gzip": b"\x1f\x8b\x08junk",
}


def _chunked(body: bytes) -> bytes:
    half = len(body) // 2
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:])) + b"0\r\n\r\n"


def _warc(path: Path, records: list[tuple[str, list[tuple[str, str]], bytes]]) -> None:
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for url, headers, body in records:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"), *headers], protocol="HTTP/1.1")
            warc_headers = {"WARC-Identified-Payload-Type": "text/html"}
            record = writer.create_warc_record(
                url, "response", payload=io.BytesIO(body), http_headers=http, warc_headers_dict=warc_headers
            )
            writer.write_record(record)


def _read(reader_class: type, path: Path) -> tuple[dict[str, str], Counter]:
    counts: Counter = Counter()
    reader = reader_class(str(path.parent), glob_pattern=path.name)
    reader.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    return {d.metadata["url"]: d.text for d in reader.run(None, 0, 1)}, counts


def _readers() -> list[type]:
    readers: list[type] = [RobustWarcReader]
    try:
        import fastwarc  # noqa: F401

        from curate.warc_fastwarc import FastWarcReader
    except ImportError:
        return readers
    return [*readers, FastWarcReader]


@pytest.mark.parametrize("reader_class", _readers(), ids=lambda c: c.__name__)
def test_every_content_encoding_is_decoded(tmp_path: Path, reader_class: type) -> None:
    records = [
        (f"https://enc.example/{i}", [("Content-Encoding", enc)], body) for i, (enc, body) in enumerate(ENCODED.items())
    ]
    records.append(("https://enc.example/stored-decoded", [("Content-Encoding", "gzip")], HTML.encode()))  # ClueWeb09
    records.append(("https://enc.example/chunked-br", [("Content-Encoding", "br"), ("Transfer-Encoding", "chunked")],
                    _chunked(ENCODED["br"])))  # fmt: skip
    broken = [
        (f"https://broken.example/{i}", [("Content-Encoding", enc)], body)
        for i, (enc, body) in enumerate(BROKEN.items())
    ]
    path = tmp_path / "encoded.warc.gz"
    _warc(path, records + broken)
    texts, counts = _read(reader_class, path)
    assert {url: texts.get(url) for url, _, _ in records} == {url: HTML for url, _, _ in records}
    assert counts["skipped_undecodable"] == len(broken) and counts["record_error"] == 0
    assert not set(texts) & {url for url, _, _ in broken}


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd", "deflate"])
def test_a_content_encoding_bomb_stops_at_the_cap(coding: str) -> None:
    zeros = b"\0" * (32 << 20)
    body = {"gzip": gzip.compress, "br": brotli.compress, "zstd": zstandard.ZstdCompressor().compress,
            "deflate": zlib.compress}[coding](zeros)  # fmt: skip
    assert len(body) < 1 << 20
    with pytest.raises(BodyTooLarge):
        decode_body(body, coding, 1 << 20)
    assert decode_body(body, coding, 64 << 20) == zeros


def test_unknown_and_truncated_codings_are_undecodable() -> None:
    for header, body in (("compress", b"x"), ("br", ENCODED["br"][:-3]), ("gzip", ENCODED["gzip"][:-12])):
        with pytest.raises(UndecodableBody):
            decode_body(body, header, 1 << 20)


PAGES = {  # a page whose charset is all 7-bit bytes decodes as UTF-8 without being UTF-8
    "ja": "<html><body><p>東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。</p></body></html>",
    "ru": "<html><body><p>Москва — столица России, крупнейший город страны.</p></body></html>",
    "en": HTML,
}


@pytest.mark.parametrize(
    ("lang", "charset"),
    [("ja", "utf-16-le"), ("ja", "utf-16-be"), ("ru", "utf-16-le"), ("en", "utf-16-be"), ("ja", "iso-2022-jp")],
)
def test_a_page_in_a_7_bit_charset_is_decoded_not_kept_as_utf8(lang: str, charset: str) -> None:
    """UTF-16 without a byte order mark (every other byte NUL) and ISO-2022-JP (escape sequences) were kept as
    NUL- or escape-laden text (valid UTF-8 bytes), or lost (Japanese UTF-16 is not): decoded now."""
    from curate.warc import decode_payload

    page = PAGES[lang]
    assert decode_payload(page.encode(charset)) == page
    assert decode_payload(page.encode("utf-8")) == page
