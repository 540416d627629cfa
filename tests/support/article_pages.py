"""Small article pages that pass the FineWeb recipe, for end-to-end runs of ``pipelines.run``.

Each page is three of the sample crawl's original English paragraphs (``scripts/sample/texts.py``),
disjoint between pages, so no two pages are near-duplicates unless a test makes them so; ``extra``
paragraphs let a test plant text (an eval passage, an edit) into a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from scripts.sample.texts import ENGLISH
from tests.support.warc_writer import Page

PARAGRAPHS_PER_PAGE = 3
MAX_PAGES = len(ENGLISH) // PARAGRAPHS_PER_PAGE


def article_paragraphs(i: int) -> list[str]:
    """The paragraphs of article ``i`` (0 <= i < MAX_PAGES)."""
    if not 0 <= i < MAX_PAGES:
        raise ValueError(f"article {i}: there are {MAX_PAGES}")
    start = i * PARAGRAPHS_PER_PAGE
    return [text for _, text in ENGLISH[start : start + PARAGRAPHS_PER_PAGE]]


def article_html(title: str, paragraphs: Sequence[str]) -> bytes:
    body = "".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    return (
        f"<html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title></head>"
        f"<body><article><h1>{escape(title)}</h1>{body}</article></body></html>"
    ).encode()


def article_page(
    i: int, url: str | None = None, extra: Sequence[str] = (), date: str = "2024-02-20T12:00:00Z"
) -> Page:
    """Article ``i`` as a WARC page, with ``extra`` paragraphs after its second one."""
    paragraphs = article_paragraphs(i)
    paragraphs[2:2] = list(extra)
    topic = ENGLISH[i * PARAGRAPHS_PER_PAGE][0]
    html = article_html(f"Notes on {topic}, part {i}", paragraphs)
    return Page(url or f"https://articles.example/{topic}/{i}", html, date=date)
