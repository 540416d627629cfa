"""Bad input is counted by reason, never crashes a task and never loses the rest of the file."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest
from datatrove.pipeline.readers import WarcReader
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from curate.extract import MainTextExtractor
from curate.warc import RobustWarcReader, iter_warc_records, record_to_dict
from tests.support import shared_data
from tests.support.warc_writer import Page, write_pages

ARTICLE = (
    "<html><head><title>{t}</title></head><body><nav><a href='/'>Home</a></nav><article><h1>{t}</h1>"
    + "<p>The committee met on Tuesday to discuss the plans for the new library, and the members agreed "
    "that the building should open to the public before the end of the year. {t}</p>" * 4 + "</article></body></html>"
)


def _pages(n: int) -> list[Page]:
    return [Page(f"https://news.example.org/story-{i}", ARTICLE.format(t=f"Story {i}").encode()) for i in range(n)]


def _read(path: Path) -> tuple[list, Counter]:
    counts: Counter = Counter()
    reader = RobustWarcReader(str(path.parent), glob_pattern=path.name)
    reader.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    docs = list(reader.run(None, 0, 1))
    return docs, counts


def _member_offsets(data: bytes) -> list[tuple[int, int]]:
    it = ArchiveIterator(io.BytesIO(data))
    return [(it.get_record_offset(), it.get_record_length()) for _ in it]


def test_corrupt_and_truncated_members_cost_only_themselves(tmp_path: Path) -> None:
    good = tmp_path / "good.warc.gz"
    write_pages(_pages(30), good)
    data = good.read_bytes()
    members = _member_offsets(data)
    corrupt_at, corrupt_len = members[5]
    cut_at, cut_len = members[12]
    broken = bytearray(data)
    broken[corrupt_at + 30 : corrupt_at + 90] = b"\x00" * 60  # deflate data destroyed
    broken = bytes(broken[: cut_at + cut_len // 2]) + bytes(broken[cut_at + cut_len :])  # member cut mid-way
    broken += data[members[-1][0] : members[-1][0] + members[-1][1] // 3]  # truncated final member
    path = tmp_path / "broken.warc.gz"
    path.write_bytes(broken)

    docs, counts = _read(path)
    urls = {d.metadata["url"] for d in docs}
    assert len(docs) == 28, counts
    assert "https://news.example.org/story-5" not in urls and "https://news.example.org/story-12" not in urls
    assert "https://news.example.org/story-29" in urls
    assert counts["corrupt_member"] + counts["truncated_member"] >= 3


def test_datatrove_reader_stops_where_ours_goes_on(tmp_path: Path) -> None:
    """The reason this reader exists: the stock reader raises at the first broken member."""
    path = tmp_path / "good.warc.gz"
    write_pages(_pages(10), path)
    data = path.read_bytes()
    at, length = _member_offsets(data)[3]
    path.write_bytes(data[: at + length // 2] + data[at + length :])
    with pytest.raises(Exception):  # noqa: B017 - any failure of the stock reader proves the point
        list(WarcReader(str(tmp_path), glob_pattern=path.name).run(None, 0, 1))
    docs, _ = _read(path)
    assert len(docs) == 9


def _write_records(path: Path, records: list[tuple[str, str, list[tuple[str, str]], bytes, dict]]) -> None:
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for rec_type, url, http_headers, body, extra in records:
            http = StatusAndHeaders("200 OK", http_headers, protocol="HTTP/1.1") if http_headers else None
            record = writer.create_warc_record(
                url, rec_type, payload=io.BytesIO(body), http_headers=http, warc_headers_dict=extra
            )
            writer.write_record(record)


def test_charsets_records_and_sizes_are_counted(tmp_path: Path) -> None:
    russian = "<html><body><p>Привет, как дела? Это страница на русском языке.</p></body></html>"
    german = "<html><body><p>Größe, Übermaß und Straße: schöne Grüße aus München.</p></body></html>"
    html = [("Content-Type", "text/html; charset=utf-8")]
    path = tmp_path / "mixed.warc.gz"
    _write_records(
        path,
        [
            ("warcinfo", "", [], b"software: test", {}),
            ("response", "https://a.example/ru", html, russian.encode("cp1251"), {}),  # declared utf-8: wrong
            (
                "response",
                "https://a.example/de",
                [("Content-Type", "text/html; charset=ascii")],
                german.encode("latin-1"),
                {},
            ),
            ("response", "https://a.example/empty", html, b"", {}),
            (
                "response",
                "https://a.example/png",
                [("Content-Type", "image/png")],
                b"\x89PNG\r\n\x1a\n" + b"0" * 64,
                {"WARC-Identified-Payload-Type": "image/png"},
            ),
            ("resource", "https://a.example/res", [], b"<html>resource</html>", {}),
            ("metadata", "https://a.example/ru", [], b"fetchTimeMs: 12", {}),
            (
                "response",
                "https://a.example/cut",
                html,
                b"<html><body><p>cut here",
                {"WARC-Truncated": "length"},
            ),
        ],
    )
    docs, counts = _read(path)
    texts = {d.metadata["url"]: d.text for d in docs}
    assert "Привет, как дела?" in texts["https://a.example/ru"]
    assert "schöne Grüße" in texts["https://a.example/de"]
    assert counts["skipped_empty"] == 1
    assert counts["skipped_non_html"] == 1
    assert counts["skipped_resource"] == 1 and counts["skipped_metadata"] == 1 and counts["skipped_warcinfo"] == 1
    assert counts["truncated_record"] == 1
    assert set(texts) == {"https://a.example/ru", "https://a.example/de", "https://a.example/cut"}


def test_huge_and_deeply_nested_pages_do_not_stall_extraction(tmp_path: Path) -> None:
    """A page over ``max_html_bytes`` characters is the extractor's ``too_large``; one over four times
    that many bytes is never inflated: the reader counts it (``too_large_member``)."""
    nested = "<html><body>" + "<div>" * 5000 + "<p>deep text</p>" + "</div>" * 5000 + "</body></html>"
    paragraph = "<p>filler paragraph of a very large page.</p>"
    big = "<html><body>" + paragraph * 300_000 + "</body></html>"
    huge = "<html><body>" + paragraph * 1_300_000 + "</body></html>"
    assert 10_000_000 < len(big) < 40_000_000 < len(huge)
    pages = [Page("https://x.example/nested", nested.encode()), Page("https://x.example/big", big.encode())]
    pages += [Page("https://x.example/huge", huge.encode())] + _pages(2)
    path = tmp_path / "hostile.warc.gz"
    write_pages(pages, path)
    docs, reader_counts = _read(path)
    assert len(docs) == 4 and reader_counts["too_large_member"] == 1, reader_counts
    extractor = MainTextExtractor(timeout=5.0)
    counts: Counter = Counter()
    extractor.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    out = list(extractor.run(iter(docs), 0, 1))
    urls = {d.metadata["url"] for d in out}
    assert {"https://news.example.org/story-0", "https://news.example.org/story-1"} <= urls
    assert counts["dropped_too_large"] == 1
    assert counts["total"] == 4


def test_extraction_timeout_is_counted_and_the_task_goes_on() -> None:
    from datatrove.data import Document

    paragraphs = "".join(f"<p>Paragraph number {i} has some words of text in it.</p>" for i in range(20000))
    slow = f"<html><body>{paragraphs}</body></html>"  # about 1-3 s of trafilatura
    docs = [Document(text=slow, id="slow", metadata={"url": "https://s.example/"})]
    docs.append(Document(text=ARTICLE.format(t="Fast"), id="fast", metadata={"url": "https://f.example/"}))
    extractor = MainTextExtractor(timeout=0.3)
    counts: Counter = Counter()
    extractor.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    out = list(extractor.run(iter(docs), 0, 1))
    assert counts["total"] == 2
    assert counts["dropped_timeout"] == 1
    assert [d.id for d in out] == ["fast"]


@pytest.mark.parametrize("name", ["aut_archive-org-2008_heritrix.warc.gz", "clueweb09-ja_quirk.warc.gz"])
def test_old_warc_versions_read(name: str) -> None:
    """WARC/0.17 (Heritrix 1.14) and WARC/0.18 (ClueWeb09, empty payload types) give documents."""
    root = shared_data.require()
    path = root / "warc_samples" / name
    docs, counts = _read(path)
    assert len(docs) > 20, counts
    assert all(d.metadata["url"] and d.metadata["date"] for d in docs)


def test_every_real_warc_sample_reads_without_error() -> None:
    shared_data.require()
    for path in shared_data.warc_sample_files():
        counts = _count_records(path)
        assert counts["corrupt_member"] == 0 and counts["corrupt_record"] == 0, (path.name, counts)


def _count_records(path: Path) -> Counter:
    counts: Counter = Counter()
    with open(path, "rb") as f:
        for record in iter_warc_records(f, lambda kind, off, err: counts.update([kind])):
            record_to_dict(record, lambda *k, value=1, unit=None: counts.update(k))
    return counts


def test_gzip_member_reader_matches_warcio_on_clean_files() -> None:
    shared_data.require()
    for path in shared_data.warc_sample_files():
        data = path.read_bytes()
        ours = [r.rec_headers.get("WARC-Record-ID") for r in iter_warc_records(io.BytesIO(data))]
        theirs = [r.rec_headers.get("WARC-Record-ID") for r in ArchiveIterator(io.BytesIO(data))]
        assert ours == theirs, path.name


def _documents(data: bytes) -> list[dict]:
    pages = []
    for record in iter_warc_records(io.BytesIO(data)):
        page = record_to_dict(record, lambda *k, value=1, unit=None: None)
        if page:
            pages.append(page)
    return pages


def test_plain_and_zstd_warcs_give_the_documents_of_the_gzip_file() -> None:
    """The old reader read every plain ``.warc`` record to its end before yielding it (0 documents
    from the real samples); plain and ``.warc.zst`` copies now give exactly the ``.warc.gz`` documents."""
    import zstandard

    from curate.warc_containers import iter_gzip_members

    paths = shared_data.warc_sample_files() if shared_data.available() else []
    paths = [p for p in paths if p.name.endswith(".warc.gz")]
    total = 0
    for path in [Path(__file__).parents[2] / "pipelines" / "sample" / "sample.warc.gz", *paths]:
        gz = path.read_bytes()
        members = [m for _, m in iter_gzip_members(io.BytesIO(gz), 1 << 30)]
        expected = _documents(gz)
        assert _documents(b"".join(members)) == expected, path.name
        assert _documents(b"".join(zstandard.ZstdCompressor().compress(m) for m in members)) == expected, path.name
        total += len(expected)
    assert total >= 270
