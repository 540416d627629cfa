"""An HTTP body's ``Content-Encoding`` undone, every coding a crawler meets, each with an output cap.

warcio decodes gzip, deflate and (with the brotli package) br itself, but its br path breaks with
brotli 1.2 (every valid ``br`` record became ``record_error``), and it leaves ``x-gzip``, ``zstd`` and
stacked codings (``gzip, gzip``) encoded, so those pages ended as ``skipped_undecodable``. Here the
body is read as sent (de-chunked only) and the codings are undone last to first, as RFC 9110 lists
them; no stage may produce more than ``limit`` bytes (a compression bomb in ``Content-Encoding`` costs
at most the cap, like the container caps of ``curate/warc_limits.py``).
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable

IDENTITY = ("", "identity", "none")


class UndecodableBody(ValueError):
    """A body that does not decode with the codings its headers name, or names an unknown coding."""


class BodyTooLarge(ValueError):
    """A body whose decoded size passes the cap."""


def _zlib(data: bytes, limit: int, wbits: int) -> bytes:
    """Every concatenated stream of `data` (a gzip body may hold several members), at most `limit` bytes."""
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise BodyTooLarge(f"more than {limit} bytes")
        if not inflater.eof:
            if inflater.unconsumed_tail:  # stopped at the cap's edge with input left: more output follows
                raise BodyTooLarge(f"more than {limit} bytes")
            raise UndecodableBody("truncated stream")
        data = inflater.unused_data.lstrip(b"\0")  # some servers pad members
        if wbits != 31:
            break
    return bytes(out)


def _gzip(data: bytes, limit: int) -> bytes:
    return _zlib(data, limit, 31)


def _deflate(data: bytes, limit: int) -> bytes:
    """HTTP's "deflate" is zlib-wrapped by the standard and raw by many servers: either is accepted."""
    try:
        return _zlib(data, limit, 15)
    except zlib.error:
        return _zlib(data, limit, -15)


def _brotli(data: bytes, limit: int) -> bytes:
    import brotli

    decompressor = brotli.Decompressor()
    out = decompressor.process(data, output_buffer_limit=limit + 1)
    if len(out) > limit or not decompressor.can_accept_more_data():
        raise BodyTooLarge(f"more than {limit} bytes")
    if not decompressor.is_finished():
        raise UndecodableBody("truncated stream")
    return out


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise BodyTooLarge(f"more than {limit} bytes")
    return out


DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate, "br": _brotli, "zstd": _zstd,
}  # fmt: skip


def codings(header: str | None) -> list[str]:
    """The codings a ``Content-Encoding`` header names, in the order they were applied, identity left out."""
    return [c.strip().lower() for c in (header or "").split(",") if c.strip().lower() not in IDENTITY]


def decode_body(body: bytes, header: str | None, limit: int) -> bytes:
    """`body` with the header's codings undone (last applied first); BodyTooLarge past `limit` bytes at
    any stage, UndecodableBody for an unknown coding or data that does not decode."""
    for coding in reversed(codings(header)):
        decoder = DECODERS.get(coding)
        if decoder is None:
            raise UndecodableBody(f"unknown Content-Encoding {coding[:40]!r}")
        try:
            body = decoder(body, limit)
        except BodyTooLarge:
            raise
        except Exception as err:  # zlib.error, brotli.error, zstandard.ZstdError: the body is not what it says
            raise UndecodableBody(f"{coding}: {err}") from None
    return body
