"""A crawl listing that cannot be fetched says why: a host that does not resolve or answer is not a missing crawl.

A real HTTP server on 127.0.0.1 (http.server) serves a mirror with one crawl; fsspec reads it over HTTP."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipelines.sources import SourceError, resolve_crawl


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # no request lines on the test's stderr
        pass


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[str]:
    listing = tmp_path / "crawl-data" / "CC-MAIN-2024-18" / "warc.paths.gz"
    listing.parent.mkdir(parents=True)
    listing.write_bytes(gzip.compress(b"crawl-data/CC-MAIN-2024-18/segments/1/warc/a.warc.gz\n"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listed_crawl_resolves_and_a_missing_one_is_named(mirror: str) -> None:
    assert resolve_crawl("CC-MAIN-2024-18", mirror).paths == ("crawl-data/CC-MAIN-2024-18/segments/1/warc/a.warc.gz",)
    with pytest.raises(SourceError, match=rf"^no crawl CC-MAIN-2024-99 under {mirror}: listing not found \(HTTP 404\)"):
        resolve_crawl("CC-MAIN-2024-99", mirror)


@pytest.mark.parametrize(
    ("base", "reason"),
    [
        ("http://cc.invalid", r"Cannot connect to host cc\.invalid:80 .*\[.*(not known|resolution|resolve).*\]"),
        (f"http://127.0.0.1:{_closed_port()}", r"Cannot connect to host 127\.0\.0\.1:\d+"),
    ],
    ids=["unresolved host", "nothing listening"],
)
def test_an_unreachable_host_is_named_not_called_a_missing_listing(base: str, reason: str) -> None:
    with pytest.raises(SourceError, match=rf"^cannot fetch listing {base}/crawl-data/CC-MAIN-2024-10/\S+: {reason}"):
        resolve_crawl("CC-MAIN-2024-10", base)
