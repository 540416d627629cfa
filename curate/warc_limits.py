"""What one WARC record may cost the reader, derived from the extractor's ``max_html_bytes``.

Without caps a 16.9 KB ``Content-Encoding: gzip`` body inflated to 1.1 GB and a 2.7 MB gzip member
to 4.85 GiB of RSS before any size check ran. The reader now stops inflating at these caps:

* a body is read up to ``body_bytes = 4 * max_html_bytes``: no encoding the reader decodes (UTF-8,
  UTF-16/32, GB18030, single-byte codes) spends more than 4 bytes on a character, so a longer body
  always decodes to more than ``max_html_bytes`` characters, which the extractor drops as
  ``too_large`` anyway. Every page the extractor would look at is read exactly as before;
  longer ones are counted by the reader (``too_large``) instead of the extractor;
* a member (gzip member, zstd frame, plain record) is inflated up to ``member_bytes``: the body cap
  plus 1 MiB of WARC and HTTP headers.

Peak memory per record is then a few times ``member_bytes`` (the member, its body, the decoded
text): with the recipe's 10 MB that is well under 1 GiB (measured by the fuzz suite, see
``tests/support/hostile_warc.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_HTML_BYTES = 10_000_000  # pipelines/recipes/fineweb.yaml extraction.max_html_bytes
MAX_BYTES_PER_CHAR = 4  # UTF-8, UTF-32, GB18030 at most 4 bytes per code point; UTF-16 2 or 4
HEADER_ALLOWANCE = 1 << 20  # WARC + HTTP header blocks are a few KB; 1 MiB is far beyond any real one


@dataclass(frozen=True)
class ReadLimits:
    """Caps on one record, from the page-size limit the extractor applies to decoded text."""

    max_html_bytes: int = DEFAULT_MAX_HTML_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.max_html_bytes, bool) or not isinstance(self.max_html_bytes, int):
            raise ValueError(f"max_html_bytes must be an integer, got {self.max_html_bytes!r}")
        if self.max_html_bytes < 1:
            raise ValueError(f"max_html_bytes must be >= 1, got {self.max_html_bytes}")

    @property
    def body_bytes(self) -> int:
        return MAX_BYTES_PER_CHAR * self.max_html_bytes

    @property
    def member_bytes(self) -> int:
        return self.body_bytes + HEADER_ALLOWANCE


DEFAULT_LIMITS = ReadLimits()
