"""The language pre-check's rough text: the fast regexes and the early stop give the plain definition's text."""

from __future__ import annotations

import html as html_lib
import re
import subprocess
import sys

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
    "<!--" * 500 + "a -->" + "<!--" * 500,  # unclosed runs around one closed comment
    "<script>" * 300 + "</script>" + "<script>" * 300 + " text",
    "<style a='<svg>'>" + "x " * 100 + "<svg>y</SVG >z",  # an unclosed kind, then an opener inside its tag
    "<script" * 400 + ">" + "w " * 100 + "</script>",  # one tag end shared by every opener
    "<script>" * 100 + "<style>" * 100 + "</style>" + "<noscript x>" * 50 + "<template>" * 50 + "</template>",
    "<svg" * 100 + " t " * 100,  # no tag end at all
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


HOSTILE = {
    "unclosed comments": "<!--" * 75_000,
    "unclosed scripts": "<script>" * 37_500,
    "unclosed styles, one closer far away": "<style>" * 40_000 + "</style>",
    "openers sharing one tag end": "<svg " * 60_000 + ">",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_pages_cost_linear_time(name: str) -> None:
    """The audit's 300 KB pages (75,000 unclosed ``<!--`` took 590 s before): a CPU-time limit of 20 s in a
    child process bounds the test; the linear scans need milliseconds."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (20, 20))\n"
        "from curate.extract import rough_text\n"
        "from tests.curate.test_rough_text import HOSTILE\n"
        f"rough_text(HOSTILE[{name!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_hostile_pages_match_the_plain_definition_on_a_prefix() -> None:
    for html in HOSTILE.values():
        assert rough_text(html[:6000]) == plain_rough_text(html[:6000])
