"""Hostile WARC inputs built from real crawl samples, and the check that the reader survives them.

Issue 19 measured 410 such inputs against the old reader: 16 crashed a whole run, plain ``.warc``
gave no document at all, and bombs reached 4.85 GiB of RSS. This module rebuilds that kind of input
from the real samples (``../shared/data/warc_samples`` and the bundled ``pipelines/sample``), so the
suite keeps finding what the issue found:

* containers: ``.warc.gz`` (one member per record), plain ``.warc``, ``.warc.zst`` (one frame per
  record, with and without checksums, with a dictionary), garbage before/between/after members,
  empty files, empty and whitespace-only gzip members, one gzip stream for the whole file;
* damage: truncation at any byte, bit flips, WARC header edits (missing/empty/huge/lying
  Content-Length, missing/empty WARC-Target-URI, bad version line, a header block cut by the end of
  the file), HTTP edits (broken ``Content-Encoding``), gzip-member and HTTP-body bombs;
* odd file names (newline, unicode, spaces).

Every case knows its own records (``ids``, from warcio over the untouched seed) and which of them it
damaged. ``check`` reads a case through the reader's own record loop and asserts: no exception
escapes; each record read ends as a document or one counted reason; every record the case left
intact is read; the damaged records not read are at most the counted losses. ``run_isolated`` runs
each case in a forked child with a time limit and records its peak RSS.

    python -m tests.support.hostile_warc --n 1000      # >= 1,000 inputs, totals at the end
"""

from __future__ import annotations

import argparse
import gzip
import io
import multiprocessing as mp
import os
import random
import re
import resource
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from curate.warc import LOSSES, READ_ERRORS, RECORD_FATES, iter_warc_records, record_to_dict
from curate.warc_limits import DEFAULT_LIMITS, ReadLimits
from tests.support import shared_data
from tests.support.cli import REPO

BUNDLED_SAMPLE = REPO / "pipelines" / "sample" / "sample.warc.gz"
CASE_TIMEOUT_S = 60.0
RSS_BOUND_BYTES = 2 << 30  # the issue's bound per task
BOMB_BYTES = 1_100_000_000  # the issue's HTTP body bomb inflated to 1.1 GB
MEMBER_BOMB_BYTES = 200_000_000  # five times the member cap


@dataclass(frozen=True)
class Seed:
    """A real WARC file as raw (uncompressed) records, each with its WARC-Record-ID."""

    name: str
    records: tuple[bytes, ...]
    ids: tuple[str, ...]


@dataclass
class Case:
    """One hostile input: the file's bytes and name, the ids of its records, which were damaged,
    and (for the issue's crashes) the counter that must be seen."""

    name: str
    filename: str
    data: bytes
    ids: list[str]
    damaged: set[str] = field(default_factory=set)
    expect: str | None = None

    @property
    def intact(self) -> set[str]:
        return set(self.ids) - self.damaged


def seed_paths() -> list[Path]:
    paths = [BUNDLED_SAMPLE]
    if shared_data.available():
        paths += [p for p in shared_data.warc_sample_files() if p.name.endswith(".warc.gz")]
    return paths


@cache
def load_seed(path: Path) -> Seed:
    """Split a ``.warc.gz`` into its records with warcio (independent of the reader under test);
    a final member that does not inflate completely is left out."""
    data = path.read_bytes()
    records, ids = [], []
    it = ArchiveIterator(io.BytesIO(data))
    spans = []
    try:
        for _ in it:
            spans.append((it.get_record_offset(), it.get_record_length()))
    except Exception:  # noqa: BLE001 - warcio stops at a broken tail; what it read before is the seed
        pass
    for offset, length in spans:
        try:
            raw = gzip.decompress(data[offset : offset + length])
        except (OSError, EOFError, zlib.error):
            continue
        record = next(iter(ArchiveIterator(io.BytesIO(raw))), None)
        if record is not None:
            records.append(raw)
            ids.append(record.rec_headers.get_header("WARC-Record-ID"))
    return Seed(path.name, tuple(records), tuple(ids))


# ---- containers -----------------------------------------------------------------------------


def _gzip(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=6, mtime=0)


def _zstd(raw: bytes, checksum: bool = True, dictionary: object = None) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(write_checksum=checksum, dict_data=dictionary).compress(raw)


def encode(records: list[bytes], container: str) -> tuple[bytes, list[tuple[int, int]]]:
    """The container's bytes and each record's ``(start, end)`` in them."""
    parts, spans, pos = [], [], 0
    for raw in records:
        enc = {"gz": _gzip, "zst": _zstd, "warc": bytes}[container](raw)
        parts.append(enc)
        spans.append((pos, pos + len(enc)))
        pos += len(enc)
    return b"".join(parts), spans


SUFFIX = {"gz": ".warc.gz", "zst": ".warc.zst", "warc": ".warc"}


def _hit(spans: list[tuple[int, int]], ids: list[str], positions: list[int], margin: int = 8) -> set[str]:
    """Ids of the records whose bytes (plus ``margin`` on each side) hold one of ``positions``."""
    return {rid for (a, b), rid in zip(spans, ids, strict=True) if any(a - margin <= p < b + margin for p in positions)}


# ---- record edits ---------------------------------------------------------------------------


def split_record(raw: bytes) -> tuple[bytes, bytes]:
    """WARC header block (with its blank line) and the rest (block + trailing CRLF CRLF)."""
    cut = raw.index(b"\r\n\r\n") + 4
    return raw[:cut], raw[cut:]


def set_header(header: bytes, name: bytes, value: bytes | None) -> bytes:
    """Replace (or, with None, remove) every ``name:`` line of a WARC header block."""
    pattern = re.compile(rb"^" + re.escape(name) + rb":[^\r\n]*\r\n", re.I | re.M)
    if value is None:
        return pattern.sub(b"", header)
    line = name + b": " + value + b"\r\n"
    if pattern.search(header):
        return pattern.sub(line.replace(b"\\", b"\\\\"), header, count=1)
    return header[:-2] + line + b"\r\n"


def content_length(header: bytes) -> int:
    match = re.search(rb"^content-length:[ \t]*(\d+)", header, re.I | re.M)
    return int(match.group(1)) if match else 0


HEADER_EDITS = {
    "missing_content_length": lambda h: set_header(h, b"Content-Length", None),
    "empty_content_length": lambda h: set_header(h, b"Content-Length", b""),
    "content_length_2_63": lambda h: set_header(h, b"Content-Length", str(2**63).encode()),
    "content_length_1e30": lambda h: set_header(h, b"Content-Length", str(10**30).encode()),
    "content_length_plus_10k": lambda h: set_header(h, b"Content-Length", str(content_length(h) + 10_000).encode()),
    "content_length_minus_50": lambda h: set_header(h, b"Content-Length", str(max(content_length(h) - 50, 0)).encode()),
    "content_length_not_a_number": lambda h: set_header(h, b"Content-Length", b"12ab"),
    "missing_uri": lambda h: set_header(h, b"WARC-Target-URI", None),
    "empty_uri": lambda h: set_header(h, b"WARC-Target-URI", b""),
    "bad_version": lambda h: b"WARC/9.9" + h[h.index(b"\r\n") :],
    "not_warc": lambda h: b"WARX/1.0" + h[h.index(b"\r\n") :],
    "huge_header": lambda h: set_header(h, b"X-Padding", b"a" * 300_000),
    "binary_header": lambda h: set_header(h, b"X-Binary", bytes(range(1, 256)).replace(b"\r", b"").replace(b"\n", b"")),
    "header_without_colon": lambda h: h[:-2] + b"this line has no colon\r\n\r\n",
}
# the issue's crashes: which counter each must end as
ISSUE_EXPECT = {
    "missing_uri": "missing_url",
    "empty_uri": "missing_url",
    "content_length_2_63": None,  # counted somewhere (record_error / corrupt_record), never raised
    "content_length_1e30": None,
}


def is_html_response(raw: bytes) -> bool:
    """A response record whose HTTP payload is declared HTML (the records that become documents)."""
    header, block = split_record(raw)
    http = block[: re.search(rb"\r?\n\r?\n|$", block).start()].lower()
    payload_type = re.search(rb"^WARC-Identified-Payload-Type:[ \t]*([^\r\n]*)", header, re.I | re.M)
    declared = payload_type.group(1).strip().lower() if payload_type else b"text/html"
    return (
        b"WARC-Type: response" in header
        and block.startswith(b"HTTP/")
        and b"text/html" in http
        and (declared in (b"text/html", b""))
    )


def with_http(raw: bytes, http_headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """The record with its HTTP header lines replaced and a new body (WARC Content-Length fixed)."""
    header, block = split_record(raw)
    status = re.match(rb"[^\r\n]*", block).group(0)
    http = status + b"\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in http_headers) + b"\r\n"
    payload = http + body
    header = set_header(header, b"Content-Length", str(len(payload)).encode())
    header = set_header(header, b"WARC-Payload-Digest", None)
    header = set_header(header, b"WARC-Identified-Payload-Type", b"text/html")
    header = set_header(header, b"WARC-Block-Digest", None)
    return header + payload + b"\r\n\r\n"


GZIP_HEADER = b"\x1f\x8b\x08\0\0\0\0\0\0\xff"
MIB = 1 << 20


@cache
def _zero_chunk() -> bytes:
    """1 MiB of zeros as raw deflate ending in a full flush: the window is reset, so copies chain."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    return comp.compress(b"\0" * MIB) + comp.flush(zlib.Z_FULL_FLUSH)


def _deflate_zeros(prefix: bytes, mebibytes: int, suffix: bytes) -> tuple[bytes, int, int]:
    """Raw deflate of ``prefix + zeros + suffix`` built in well under a second, with its CRC-32 and
    Adler-32 (the checksums are computed over the real bytes, so the stream is valid)."""
    head = zlib.compressobj(6, zlib.DEFLATED, -15)
    tail = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflate = head.compress(prefix) + head.flush(zlib.Z_FULL_FLUSH) + _zero_chunk() * mebibytes
    deflate += tail.compress(suffix) + tail.flush()
    crc, adler, zeros = zlib.crc32(prefix), zlib.adler32(prefix), b"\0" * MIB
    for _ in range(mebibytes):
        crc, adler = zlib.crc32(zeros, crc), zlib.adler32(zeros, adler)
    return deflate, zlib.crc32(suffix, crc), zlib.adler32(suffix, adler)


@cache
def deflate_bomb(size: int, container: str = "gzip") -> bytes:
    """A valid gzip (or zlib, for HTTP ``deflate``) stream inflating to ``size`` zero bytes (whole MiB)."""
    deflate, crc, adler = _deflate_zeros(b"", size // MIB, b"")
    if container == "gzip":
        return GZIP_HEADER + deflate + crc.to_bytes(4, "little") + (size // MIB * MIB % 2**32).to_bytes(4, "little")
    return b"\x78\x9c" + deflate + adler.to_bytes(4, "big")


def member_bomb(raw: bytes, size: int) -> bytes:
    """A valid gzip member of the record with ``size`` zero bytes (whole MiB) appended to its body."""
    header, block = split_record(raw)
    body = block[:-4]
    header = set_header(header, b"Content-Length", str(len(body) + size // MIB * MIB).encode())
    deflate, crc, _ = _deflate_zeros(header + body, size // MIB, b"\r\n\r\n")
    total = len(header) + len(body) + size // MIB * MIB + 4
    return GZIP_HEADER + deflate + crc.to_bytes(4, "little") + (total % 2**32).to_bytes(4, "little")


# ---- case builders --------------------------------------------------------------------------


def becomes_document(raw: bytes) -> bool:
    """The untouched record is a document for the reader (the targets of edits that must drop it)."""
    record = next(iter(ArchiveIterator(io.BytesIO(raw))))
    return bool(record_to_dict(record, lambda *keys, value=1, unit=None: None))


def _pick(seed: Seed, rng: random.Random, want_html: bool = False) -> int:
    indexes = [i for i, raw in enumerate(seed.records) if not want_html or is_html_response(raw)]
    if want_html:
        indexes = [i for i in indexes if becomes_document(seed.records[i])] or indexes
    return rng.choice(indexes or list(range(len(seed.records))))


def _window(seed: Seed, rng: random.Random, size: int = 12, html: bool = False) -> tuple[list[bytes], list[str]]:
    """A run of up to ``size`` consecutive records (keeps cases small and fast); with ``html``, one
    that holds an HTML response."""
    start = rng.randrange(max(len(seed.records) - size, 0) + 1)
    if html:
        pages = [i for i, raw in enumerate(seed.records) if is_html_response(raw)]
        start = max(rng.choice(pages) - rng.randrange(size), 0) if pages else start
    return list(seed.records[start : start + size]), list(seed.ids[start : start + size])


def case_truncate(seed: Seed, rng: random.Random, container: str) -> Case:
    records, ids = _window(seed, rng)
    data, spans = encode(records, container)
    cut = rng.randrange(1, len(data))
    kept = [rid for (a, b), rid in zip(spans, ids, strict=True) if a < cut]
    return Case(f"truncate@{cut}", "cut" + SUFFIX[container], data[:cut], kept, _hit(spans, ids, [cut]) & set(kept))


def case_bitflip(seed: Seed, rng: random.Random, container: str) -> Case:
    records, ids = _window(seed, rng)
    data, spans = encode(records, container)
    buf = bytearray(data)
    positions = [rng.randrange(len(buf)) for _ in range(rng.randint(1, 3))]
    for p in positions:
        buf[p] ^= 1 << rng.randrange(8)
    return Case(f"bitflip@{positions}", "flip" + SUFFIX[container], bytes(buf), ids, _hit(spans, ids, positions))


def case_header_edit(seed: Seed, rng: random.Random, container: str, edit: str | None = None) -> Case:
    records, ids = _window(seed, rng)
    edit = edit or rng.choice(sorted(HEADER_EDITS))
    k = rng.randrange(len(records))
    header, block = split_record(records[k])
    records[k] = HEADER_EDITS[edit](header) + block
    data, _ = encode(records, container)
    return Case(f"header:{edit}#{k}", edit + SUFFIX[container], data, ids, {ids[k]})


def case_header_cut(seed: Seed, rng: random.Random) -> Case:
    """A plain ``.warc`` cut inside the last record's header block (the issue's AttributeError)."""
    records, ids = _window(seed, rng)
    data, spans = encode(records, "warc")
    header, _ = split_record(records[-1])
    cut = spans[-1][0] + rng.randrange(10, len(header) - 4)
    return Case(f"header_cut@{cut}", "headercut.warc", data[:cut], ids, {ids[-1]}, "truncated_member")


def case_http(seed: Seed, rng: random.Random, container: str, kind: str) -> Case:
    records, ids = _window(seed, rng, html=True)
    k = _pick(Seed(seed.name, tuple(records), tuple(ids)), rng, want_html=True)
    html = [(b"Content-Type", b"text/html; charset=utf-8")]
    expect = None
    if kind == "body_bomb_gzip":
        records[k] = with_http(records[k], html + [(b"Content-Encoding", b"gzip")], deflate_bomb(BOMB_BYTES))
        expect = "too_large"
    elif kind == "body_bomb_deflate":
        records[k] = with_http(records[k], html + [(b"Content-Encoding", b"deflate")], deflate_bomb(BOMB_BYTES, "zlib"))
        expect = "too_large"
    elif kind == "bad_gzip_body":
        records[k] = with_http(records[k], html + [(b"Content-Encoding", b"gzip")], b"\x1f\x8b\x08not gzip at all")
    elif kind == "bad_br_body":
        records[k] = with_http(records[k], html + [(b"Content-Encoding", b"br")], b"\xff\xfe not brotli")
    elif kind == "bad_chunked":
        records[k] = with_http(records[k], html + [(b"Transfer-Encoding", b"chunked")], b"zz\r\nabc\r\n0\r\n\r\n")
    elif kind == "binary_html":
        body = bytes(rng.randrange(256) for _ in range(50_000))
        records[k] = with_http(records[k], html, body)
    data, _ = encode(records, container)
    return Case(f"http:{kind}#{k}", kind + SUFFIX[container], data, ids, {ids[k]}, expect)


def case_member_bomb(seed: Seed, rng: random.Random) -> Case:
    records, ids = _window(seed, rng, html=True)
    k = _pick(Seed(seed.name, tuple(records), tuple(ids)), rng, want_html=True)
    parts = [_gzip(raw) for raw in records]
    parts[k] = member_bomb(records[k], MEMBER_BOMB_BYTES)
    return Case(f"member_bomb#{k}", "bomb.warc.gz", b"".join(parts), ids, {ids[k]}, "too_large_member")


def case_container(seed: Seed, rng: random.Random, kind: str) -> Case:
    records, ids = _window(seed, rng)
    junk = bytes(rng.randrange(256) for _ in range(5_000)).replace(b"\x1f\x8b", b"").replace(b"WARC/", b"")
    junk = junk.replace(b"\x28\xb5\x2f\xfd", b"")
    if kind == "empty_file":
        return Case("empty_file", "empty.warc.gz", b"", [], expect="empty_file")
    if kind in ("garbage_prefix_gz", "garbage_prefix_zst", "garbage_prefix_warc"):
        container = kind.rsplit("_", 1)[1]
        data, _ = encode(records, container)
        return Case(kind, "junk" + SUFFIX[container], junk + data, ids, expect="garbage_bytes")
    if kind == "garbage_between_gz":
        parts = [_gzip(r) for r in records]
        parts.insert(len(parts) // 2, junk)
        return Case(kind, "between.warc.gz", b"".join(parts), ids, expect="garbage_bytes")
    if kind == "trailing_garbage_gz":
        return Case(kind, "tail.warc.gz", encode(records, "gz")[0] + junk, ids, expect="garbage_bytes")
    if kind == "empty_members_gz":
        parts = [_gzip(r) for r in records]
        parts[1:1] = [_gzip(b""), _gzip(b"\r\n\r\n")]
        return Case(kind, "emptymember.warc.gz", b"".join(parts), ids, expect="empty_member")
    if kind == "one_gzip_stream":
        return Case(kind, "onestream.warc.gz", _gzip(b"".join(records)), ids)
    if kind == "nested_gzip":
        return Case(kind, "nested.warc.gz", _gzip(encode(records, "gz")[0]), [], expect="corrupt_member")
    if kind == "zst_no_checksum":
        return Case(kind, "nock.warc.zst", b"".join(_zstd(r, checksum=False) for r in records), ids)
    if kind == "zst_dictionary":
        import zstandard

        dictionary = zstandard.train_dictionary(4096, [r[:2000] for r in records] * 8)
        frame = zstandard.ZstdCompressor().compress(dictionary.as_bytes())
        head = b"\x5d\x2a\x4d\x18" + len(frame).to_bytes(4, "little") + frame
        return Case(kind, "dict.warc.zst", head + b"".join(_zstd(r, dictionary=dictionary) for r in records), ids)
    if kind == "gz_named_zst":
        return Case(kind, "misnamed.warc.zst", encode(records, "gz")[0], ids)
    raise ValueError(kind)


CONTAINER_KINDS = (
    "empty_file",
    "garbage_prefix_gz",
    "garbage_prefix_zst",
    "garbage_prefix_warc",
    "garbage_between_gz",
    "trailing_garbage_gz",
    "empty_members_gz",
    "one_gzip_stream",
    "nested_gzip",
    "zst_no_checksum",
    "zst_dictionary",
    "gz_named_zst",
)
HTTP_KINDS = ("body_bomb_gzip", "body_bomb_deflate", "bad_gzip_body", "bad_br_body", "bad_chunked", "binary_html")
ODD_NAMES = ("new\nline.warc.gz", "ünïcødé 文字.warc.gz", " lead space.warc", "semi;colon $x.warc.zst")


def fixed_cases(seeds: list[Seed], rng: random.Random) -> list[Case]:
    """Every container kind, every header edit in every container, every HTTP edit, the bombs and
    the issue's crashes: the deterministic core of the suite."""
    cases = [case_container(rng.choice(seeds), rng, kind) for kind in CONTAINER_KINDS]
    for container in SUFFIX:
        cases += [case_header_edit(rng.choice(seeds), rng, container, edit) for edit in sorted(HEADER_EDITS)]
    cases += [case_http(rng.choice(seeds), rng, "gz", kind) for kind in HTTP_KINDS]
    cases += [case_http(rng.choice(seeds), rng, "warc", "body_bomb_gzip"), case_member_bomb(rng.choice(seeds), rng)]
    cases += [case_header_cut(rng.choice(seeds), rng)]
    return cases + issue_cases(seeds)


def issue_cases(seeds: list[Seed]) -> list[Case]:
    """The 16 inputs that crashed a run in issue 19, rebuilt: missing and empty URI, Content-Length
    2**63 and 10**30, each on a response record, in .warc.gz and plain .warc; plain .warc cut inside
    a header block (the newline file name is pipelines/sources.py's to refuse)."""
    rng = random.Random(19)
    cases = []
    for edit in ("missing_uri", "empty_uri", "content_length_2_63", "content_length_1e30"):
        for container in ("gz", "warc"):
            seed = seeds[len(cases) % len(seeds)]
            case = _response_edit(seed, rng, container, edit)
            case.name = "issue19:" + case.name
            cases.append(case)
    for i in range(7):
        case = case_header_cut(seeds[i % len(seeds)], rng)
        case.name = "issue19:" + case.name
        cases.append(case)
    case = case_header_edit(seeds[0], rng, "gz", "bad_version")
    case.name, case.filename = "issue19:newline_name", "new\nline.warc.gz"
    return cases + [case]


def _response_edit(seed: Seed, rng: random.Random, container: str, edit: str) -> Case:
    records, ids = _window(seed, rng, html=True)
    k = _pick(Seed(seed.name, tuple(records), tuple(ids)), rng, want_html=True)
    header, block = split_record(records[k])
    records[k] = HEADER_EDITS[edit](header) + block
    data, _ = encode(records, container)
    return Case(f"header:{edit}#{k}", edit + SUFFIX[container], data, ids, {ids[k]}, ISSUE_EXPECT[edit])


def random_cases(seeds: list[Seed], n: int, rng: random.Random) -> list[Case]:
    """``n`` random truncations, bit flips and header edits over the seeds and containers."""
    out = []
    for i in range(n):
        seed = rng.choice(seeds)
        container = rng.choice(sorted(SUFFIX))
        builder = (case_truncate, case_bitflip, case_header_edit)[i % 3]
        case = builder(seed, rng, container)
        if i % 17 == 0:
            case.filename = ODD_NAMES[(i // 17) % len(ODD_NAMES)]
        out.append(case)
    return out


def all_seeds() -> list[Seed]:
    return [s for s in (load_seed(p) for p in seed_paths()) if len(s.records) >= 3]


# ---- the check ------------------------------------------------------------------------------


def account(path: Path, limits: ReadLimits = DEFAULT_LIMITS) -> dict:
    """Read ``path`` through the reader's own record loop: ids read, each record's fate, losses."""
    losses: Counter = Counter()
    fates: Counter = Counter()
    read_ids: list[str] = []

    def on_error(kind: str, offset: int, err: Exception) -> None:
        losses[kind] += 1

    with open(path, "rb") as f:
        for record in iter_warc_records(f, on_error, limits):
            read_ids.append(record.rec_headers.get_header("WARC-Record-ID"))
            seen: list[str] = []

            def stat(*keys: str, value: int = 1, unit: str | None = None, seen: list[str] = seen) -> None:
                seen.extend(k for k in keys if k in RECORD_FATES or k.startswith("skipped_"))

            try:
                data = record_to_dict(record, stat, limits.body_bytes)
            except READ_ERRORS:
                seen.append("record_error")
                data = None
            if data:
                seen.append("document")
            fates["+".join(seen) or "none"] += 1
    return {"read_ids": read_ids, "fates": fates, "losses": losses}


def problems(case: Case, result: dict) -> list[str]:
    """What is wrong with a case's outcome (empty when the reader accounted for every record)."""
    out = []
    bad_fates = {k: v for k, v in result["fates"].items() if "+" in k or k == "none"}
    if bad_fates:
        out.append(f"records without exactly one fate: {bad_fates}")
    read = set(result["read_ids"])
    if missing := case.intact - read:
        out.append(f"{len(missing)} intact record(s) not read")
    unknown = sum(1 for rid in result["read_ids"] if rid not in set(case.ids))  # damaged ids read back changed
    lost = len((case.damaged & set(case.ids)) - read) - unknown
    counted = sum(result["losses"][k] for k in LOSSES) + result["losses"]["missing_url"]
    if lost > counted:
        out.append(f"{lost} damaged record(s) lost, {counted} loss(es) counted")
    if case.expect and not (result["losses"][case.expect] or result["fates"][case.expect]):
        out.append(f"expected a {case.expect} count; fates {dict(result['fates'])}, losses {dict(result['losses'])}")
    return out


def _child(case: Case, folder: str, conn: object) -> None:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # warcio prints a warning per Content-Length lie
    # a forked child starts with its parent's resident set as its peak (a long pytest run: > 1 GiB); what the
    # input costs is the growth past it
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    try:
        path = Path(folder) / case.filename
        path.write_bytes(case.data)
        result = account(path)
        outcome = {"problems": problems(case, result), "crash": None, "fates": result["fates"]}
        outcome["losses"] = result["losses"]
    except BaseException:  # noqa: BLE001 - any escape is what the suite is looking for
        outcome = {"problems": [], "crash": traceback.format_exc(limit=6), "fates": Counter(), "losses": Counter()}
    outcome["seconds"] = time.perf_counter() - start
    outcome["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - inherited
    conn.send(outcome)  # type: ignore[attr-defined]


def run_isolated(case: Case, folder: Path, timeout: float = CASE_TIMEOUT_S) -> dict:
    """Run one case in a forked child: a crash, a hang (killed at ``timeout``) or the outcome."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    sub = folder / f"case{time.monotonic_ns()}"
    sub.mkdir()
    proc = ctx.Process(target=_child, args=(case, str(sub), child))
    proc.start()
    child.close()
    outcome = parent.recv() if parent.poll(timeout) else None
    proc.join(5 if outcome else 0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    for p in sub.iterdir():
        p.unlink()
    sub.rmdir()
    if outcome is None:
        return {"problems": [], "crash": None, "hang": True, "rss": 0, "seconds": timeout}
    return {**outcome, "hang": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="random cases on top of the fixed ones")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = parser.parse_args(argv)
    import tempfile

    rng = random.Random(args.seed)
    seeds = all_seeds()
    cases = fixed_cases(seeds, rng) + random_cases(seeds, args.n, rng)
    totals: Counter = Counter()
    peak, slowest = 0, 0.0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        for case in cases:
            outcome = run_isolated(case, Path(tmp))
            totals["inputs"] += 1
            totals["records"] += len(case.ids)
            totals.update(f"loss:{k}" for k, v in outcome.get("losses", {}).items() for _ in range(v))
            for label, bad in (("crashes", outcome["crash"]), ("hangs", outcome["hang"])):
                if bad:
                    totals[label] += 1
                    print(f"{label[:-1].upper()} {case.name} ({case.filename!r})\n{bad if bad is not True else ''}")
            if outcome["problems"]:
                totals["unaccounted"] += 1
                print(f"UNACCOUNTED {case.name} ({case.filename!r}): {outcome['problems']}")
            peak = max(peak, outcome["rss"])
            slowest = max(slowest, outcome["seconds"])
    seconds = time.perf_counter() - start
    print(
        f"{totals['inputs']} inputs from {len(seeds)} seeds ({totals['records']} records): "
        f"{totals['crashes']} crashes, {totals['hangs']} hangs, {totals['unaccounted']} with unaccounted records; "
        f"peak RSS {peak / 2**20:.0f} MiB per input (bound {RSS_BOUND_BYTES / 2**30:.0f} GiB), "
        f"slowest input {slowest:.1f} s, total {seconds:.0f} s"
    )
    print("losses counted: " + ", ".join(f"{k[5:]} {v}" for k, v in sorted(totals.items()) if k.startswith("loss:")))
    bad = totals["crashes"] + totals["hangs"] + totals["unaccounted"] + (peak > RSS_BOUND_BYTES)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
