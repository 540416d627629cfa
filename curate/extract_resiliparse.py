"""Main-text extraction with resiliparse (DCLM's extractor), behind the trafilatura step's contract.

Why: trafilatura is most of the curate stage's CPU time; resiliparse's ``extract_plain_text`` is a
C++ DOM walk with a main-content heuristic, many times faster (``python -m bench.extraction``
measures both on the same pages). DCLM (Li et al. 2024) extracted its pool with resiliparse's
``main_content=True``; its text keeps more boilerplate than trafilatura's, which DCLM's later
filters (fastText quality classifier) remove. The FineWeb recipe keeps trafilatura (parity).

``ResiliparseExtractor`` is ``MainTextExtractor`` with another extraction callable: the same
sandbox (per-page time limit), size limit, language pre-check, drop reasons and exclusion writers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curate.extract import MainTextExtractor

if TYPE_CHECKING:
    from resiliparse.parse.html import HTMLTree


def resiliparse_extract(html: str | HTMLTree, main_content: bool = True, comments: bool = False) -> str | None:
    """Plain text of the page's main content (``None`` when nothing is left). ``html``: the page, or its tree
    already parsed (``bench.extraction_child`` parses the bytes itself, to compare).

    ``comments=False`` mirrors FineWeb's ``include_comments=False``; list bullets, alt texts and
    link targets are resiliparse's defaults except links (off: URLs are not prose)."""
    from resiliparse.extract.html2text import extract_plain_text

    text = extract_plain_text(html, main_content=main_content, comments=comments, links=False).strip()
    return text or None


class _ResiliparseExtract:
    """Picklable extraction callable for the sandbox process."""

    def __init__(self, main_content: bool, comments: bool):
        self.main_content = main_content
        self.comments = comments

    def __call__(self, html: str) -> str | None:
        return resiliparse_extract(html, self.main_content, self.comments)


class ResiliparseExtractor(MainTextExtractor):
    """HTML -> main text with resiliparse; every other behaviour is ``MainTextExtractor``'s."""

    name = "⛏ Resiliparse (sandboxed)"

    def __init__(self, main_content: bool = True, comments: bool = False, **step_options: Any):
        """``step_options``: ``MainTextExtractor``'s (timeout, max_html_bytes, precheck_*, writers)."""
        super().__init__(**step_options)
        self.extract_fn = _ResiliparseExtract(main_content, comments)
