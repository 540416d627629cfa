"""Where the DCLM row's extraction hand-over spends CPU outside resiliparse: each Python-side cost of the
reader, the shared-memory hand-over and the extraction child, on ``bench.curate``'s input.

Input: the ``html_extraction_*`` pages as one WARC plus the real ``warc_samples`` files, read with the DCLM
recipe's reader (fastwarc), as ``python -m bench.curate --only DCLM`` reads them. Each cost is timed alone,
in this process, over every record or page (CPU seconds, ``time.process_time``; medians over the repeats,
the parts alternated inside each repeat):

* reader: fastwarc reading every record's body; ``curate.warc.decode_payload`` (UTF-8, cchardet) over the
  HTML bodies; libmagic over the bodies whose record names no ``WARC-Identified-Payload-Type``;
* hand-over: a page through ``common.sandbox.SharedTextSandbox`` to a child that does nothing (parent and
  child CPU apart; the child's side includes decoding the page out of the shared buffer);
* child: the page decoded out of the buffer (UTF-8 bytes -> str); that str encoded back to UTF-8, which
  resiliparse's ``HTMLTree.parse(str)`` does first (pyo3); resiliparse on the str as the step calls it
  (``curate.extract_resiliparse.resiliparse_extract``, all of the above included); resiliparse on the UTF-8
  bytes (``HTMLTree.parse_from_bytes``), which the Python round trip would be spared, and how many pages'
  text that changes.

    python -m bench.extraction_child [--repeats 3]
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from statistics import median
from typing import Any

from common.cli import ArgumentParser, fail
from common.sandbox import SharedTextSandbox, known_utf8, run_sandboxed
from curate.extract_resiliparse import resiliparse_extract
from curate.warc import _is_text, _payload_mime, decode_payload, read_body
from curate.warc_fastwarc import FastWarcReader
from tests.support import shared_data

_CODEC = ("utf-8", "surrogatepass")


def bodies(files: list[Path]) -> tuple[list[bytes], list[bytes]]:
    """(every HTML body that the reader decodes, every body that it hands to libmagic)."""
    html, untyped = [], []
    for path in files:
        reader = FastWarcReader(str(path.parent), glob_pattern=path.name)
        with open(path, "rb") as f:
            for record in reader.records(f, lambda *_: None):
                if record.rec_type not in ("response", "conversion"):
                    continue
                mime = record.rec_headers.get("WARC-Identified-Payload-Type", None) or None
                try:
                    content = read_body(record, reader.limits.body_bytes)
                except Exception:  # undecodable bodies: no document, no decode
                    continue
                if not content:
                    continue
                if mime is None:
                    untyped.append(content)
                    mime = _payload_mime(record, content)  # libmagic, as the reader asks it
                if _is_text(mime, record.rec_type):
                    html.append(content)
    return html, untyped


def cpu(work: Callable[[Any], Any], items: Iterable[Any]) -> float:
    start = time.process_time()
    for item in items:
        work(item)
    return time.process_time() - start


def read_all(files: list[Path]) -> None:
    for path in files:
        reader = FastWarcReader(str(path.parent), glob_pattern=path.name)
        with open(path, "rb") as f:
            for record in reader.records(f, lambda *_: None):
                try:
                    record.content_stream().read()
                except OSError:  # a broken record (pywb's sample): the reader counts it and goes on
                    continue


def _nothing(html: str) -> None:
    return None


def hand_over(pages: list[str], encoded: list[bytes]) -> tuple[float, float]:
    """(parent, child) CPU seconds of every page through the shared buffer to a child that does nothing; each
    page's UTF-8 bytes are known to the hand-over (``known_utf8``), as after the reader's decoding."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with SharedTextSandbox(timeout=10.0) as sandbox:
        run_sandboxed(sandbox, "", _nothing)  # the child started outside the timing
        own = resource.getrusage(resource.RUSAGE_SELF)
        for page, data in zip(pages, encoded, strict=True):
            known_utf8(page, data)
            run_sandboxed(sandbox, page, _nothing)
        parent = resource.getrusage(resource.RUSAGE_SELF)
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        parent.ru_utime + parent.ru_stime - own.ru_utime - own.ru_stime,
        child.ru_utime + child.ru_stime - children.ru_utime - children.ru_stime,
    )


def from_bytes(data: bytes) -> str | None:
    """``resiliparse_extract`` (the step's settings) of the page's tree parsed from its UTF-8 bytes."""
    from resiliparse.parse.html import HTMLTree

    return resiliparse_extract(HTMLTree.parse_from_bytes(data))


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.repeats < 1:
        fail("--repeats must be at least 1")
    if not shared_data.available():
        fail(f"shared data not found at {shared_data.shared_data_dir()}")
    with tempfile.TemporaryDirectory() as tmp:
        pages_warc = Path(tmp) / "pages.warc.gz"
        shared_data.write_extraction_warc(pages_warc)
        files = [pages_warc, *shared_data.warc_sample_files()]
        html, untyped = bodies(files)
        import magic

        pages = [text for text in map(decode_payload, html) if text is not None]
        encoded = [page.encode(*_CODEC) for page in pages]
        changed = sum(resiliparse_extract(page) != from_bytes(data) for page, data in zip(pages, encoded, strict=True))
        parts: dict[str, list[float]] = {}

        def timed(name: str, seconds: float) -> None:
            parts.setdefault(name, []).append(seconds)

        for _ in range(args.repeats):
            timed("reader: fastwarc, every record's body", cpu(read_all, [files]))
            timed("reader: decode_payload (UTF-8, cchardet)", cpu(decode_payload, html))
            timed(
                f"reader: libmagic ({len(untyped)} untyped bodies)",
                cpu(lambda b: magic.from_buffer(b, mime=True), untyped),
            )
            parent, child = hand_over(pages, encoded)
            timed("hand-over: parent (copy, pipe, /proc)", parent)
            timed("hand-over: child (pipe, decode out of buffer)", child)
            timed("child: decode UTF-8 -> str", cpu(lambda d: str(d, *_CODEC), encoded))
            fresh = [str(data, *_CODEC) for data in encoded]
            timed("child: str -> UTF-8 (resiliparse's parse(str))", cpu(lambda s: s.encode("utf-8"), fresh))
            fresh = [str(data, *_CODEC) for data in encoded]
            timed("child: resiliparse_extract(str), all of it", cpu(resiliparse_extract, fresh))
            timed("child: resiliparse from bytes", cpu(from_bytes, encoded))
    size = sum(map(len, encoded)) / 1e6
    print(f"{len(pages)} pages, {size:.0f} MB of UTF-8; {len(untyped)} bodies without a payload type")
    print(f"{'CPU seconds (median of ' + str(args.repeats) + ')':52} {'median':>8}   each repeat")
    for name, values in parts.items():
        print(f"{name:52} {median(values):>8.3f}   {', '.join(f'{v:.3f}' for v in values)}")
    print(f"pages whose text resiliparse-from-bytes changes: {changed}")


if __name__ == "__main__":
    main()
