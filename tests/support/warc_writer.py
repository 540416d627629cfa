"""Wrap saved HTML pages into a WARC file (Common Crawl's response-record layout).

Used to run the curate stage, and datatrove's reference pipeline, over pages that were saved
outside a crawl (e.g. extraction benchmarks): the page bytes are stored unchanged, so charset
detection sees what a crawler would have seen.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


@dataclass(frozen=True)
class Page:
    url: str
    body: bytes
    record_id: str | None = None
    date: str = "2024-02-20T12:00:00Z"
    content_type: str = "text/html"


def record_id_for(url: str) -> str:
    """A stable WARC-Record-ID derived from the URL (reruns produce identical files)."""
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>"


def write_pages(pages: Iterable[Page], out: Path) -> int:
    """Write one gzip-member ``response`` record per page; returns the number written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for page in pages:
            http = StatusAndHeaders(
                "200 OK",
                [("Content-Type", page.content_type), ("Content-Length", str(len(page.body)))],
                protocol="HTTP/1.1",
            )
            headers = {
                "WARC-Record-ID": page.record_id or record_id_for(page.url),
                "WARC-Date": page.date,
                "WARC-Identified-Payload-Type": page.content_type.split(";")[0],
            }
            record = writer.create_warc_record(
                page.url,
                "response",
                payload=io.BytesIO(page.body),
                http_headers=http,
                warc_headers_dict=headers,
            )
            writer.write_record(record)
            count += 1
    tmp.replace(out)
    return count
