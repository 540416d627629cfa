"""The language pre-check's rough text: the fast regexes and the early stop give the plain definition's text."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from curate.extract import PRECHECK_HTML_CHARS, PRECHECK_TEXT_CHARS, rough_text
from tests.support import shared_data

LAZY_COMMENT = re.compile(r"<!--.*?-->", re.S)
LAZY_SCRIPT = re.compile(r"<(script|style|noscript|template|svg)\b[^>]*>.*?</\1\s*>", re.S | re.I)
TAG = re.compile(r"<[^>]{0,2000}>")


def plain_rough_text(html: str) -> str:
    text = TAG.sub(" ", LAZY_SCRIPT.sub(" ", LAZY_COMMENT.sub(" ", html[:PRECHECK_HTML_CHARS])))
    return re.sub(r"\s+", " ", html_lib.unescape(text)).strip()[:PRECHECK_TEXT_CHARS]


EDGES = [
    "<p>" + "word &amp; " * 2000 + "&#" + "0" * 50 + "65;</p>",  # a long character reference near the cut
    "<!-- a --->" + "a " * 4000,
    "<!-->" + "b " * 4000 + "-->",
    "<script>x<!-- </SCRIPT >" + " b" * 5000,
    "<style>" + "x" * 10_000,  # unclosed
    "<!--" + "y " * 10_000,  # unclosed
    "&nbsp; " * 5000,  # references that unescape to spaces, collapsed across the cut
    "z\u00a0\u2003 " * 3000,
    "x" * 3000 + " " + "&amp;" * 10 + "\n" * 5000,
    "",
    "   ",
]


@pytest.mark.parametrize("html", EDGES)
def test_edge_cases(html: str) -> None:
    assert rough_text(html) == plain_rough_text(html)


def test_real_pages() -> None:
    shared_data.require()
    for set_name in shared_data.EXTRACTION_SETS:
        for row in shared_data.ground_truth(set_name):
            html = row["html"].decode("utf-8", errors="replace")
            assert rough_text(html) == plain_rough_text(html), row["page_url"]
