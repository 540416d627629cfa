"""Compiled XPath = libxml2's XPath: the same elements in the same order, and trafilatura's output unchanged.

The oracle is lxml's own ``etree.XPath`` on the same tree: on real pages (every html_extraction page,
every expression trafilatura ships) and on random trees built from the expressions' own literals
(hypothesis), so each attribute test is hit, missed, and hit through ``translate()``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from lxml import html as lxml_html

from curate.extract import _compiled_expression_lists, compiled_xpaths, trafilatura_extract
from curate.xpath_subset import CompiledXPath, Unsupported, compile_xpath
from tests.support import shared_data


def _trafilatura_expressions() -> list[etree.XPath]:
    return [item for _, originals, _ in _compiled_expression_lists() for item in originals]


def _pairs() -> list[tuple[etree.XPath, CompiledXPath]]:
    """libxml2's expression beside the compiled one ``extract()`` runs (its memo carries across calls)."""
    return [
        (original, compiled)
        for _, originals, compiled_items in _compiled_expression_lists()
        for original, compiled in zip(originals, compiled_items, strict=True)
        if isinstance(compiled, CompiledXPath)
    ]


def _compiles(path: str) -> bool:
    try:
        compile_xpath(path)
    except Unsupported:
        return False
    return True


def test_trafilatura_boilerplate_expressions_compile() -> None:
    """The lists extract() walks on every page are all compiled (BODY, the discard lists, comments)."""
    from trafilatura import xpaths

    for name in ("BODY_XPATH", "OVERALL_DISCARD_XPATH", "PAYWALL_DISCARD_XPATH", "TEASER_DISCARD_XPATH",
                 "PRECISION_DISCARD_XPATH", "DISCARD_IMAGE_ELEMENTS", "REMOVE_COMMENTS_XPATH", "COMMENTS_XPATH",
                 "COMMENTS_DISCARD_XPATH"):
        for xpath in getattr(xpaths, name):
            assert _compiles(xpath.path), (name, xpath.path)


@pytest.mark.parametrize(
    "expression",
    [
        "//div",  # absolute path
        ".//div/p",  # more than one step
        ".//*[contains(text(), 'x')]",  # text()
        ".//*[@class][last()]",  # last()
        ".//*[string-length(@id) > 2]",
        ".//*[translate(translate(@id, 'a', 'b'), 'b', 'c') = 'c']",
        "(.//div)[0]",
        ".//*[self::*]",  # wildcards inside predicates
        ".//*[@*]",
        ".//*foo",
    ],
)
def test_outside_the_subset_is_refused(expression: str) -> None:
    with pytest.raises(Unsupported):
        compile_xpath(expression)


def _same(tree: etree._Element, pairs) -> list[str]:
    return [xpath.path[:60] for xpath, compiled in pairs if xpath(tree) != compiled(tree)]


def test_real_pages_give_the_same_elements() -> None:
    shared_data.require()
    pairs = _pairs()
    checked = 0
    for set_name in shared_data.EXTRACTION_SETS:
        for row in shared_data.ground_truth(set_name)[::2]:  # half the ~1,500 pages: about 30 s
            try:
                tree = lxml_html.fromstring(row["html"])
            except (etree.ParserError, ValueError):
                continue
            assert not _same(tree, pairs), row["page_url"]
            checked += 1
    assert checked > 300


# Random trees from the expressions' own vocabulary: every literal, upper-cased variants for translate(),
# prefixes and suffixes, so that contains / starts-with / = each go both ways.
_QUOTED = re.compile(r"[\"']([^\"']*)[\"']")
_LITERALS = sorted({literal for xpath in _trafilatura_expressions() for literal in _QUOTED.findall(xpath.path)})
_TAGS = ["div", "p", "span", "section", "article", "main", "item", "list", "header", "cite", "quote", "a", "body"]
_ATTRIBUTES = ["id", "class", "style", "role", "itemprop", "aria-hidden", "data-component",
               "data-lp-replacement-content"]
_VALUES = st.one_of(
    st.sampled_from(_LITERALS),
    st.sampled_from(_LITERALS).map(str.upper),
    st.sampled_from(_LITERALS).map(str.title),
    st.tuples(st.sampled_from(["", "x ", " ", "a-"]), st.sampled_from(_LITERALS), st.sampled_from(["", " y", "-z"]))
    .map("".join),
    st.text(alphabet="aBcFnN -_", max_size=6),
)


@st.composite
def _trees(draw, depth: int = 0) -> etree._Element:
    element = etree.Element(draw(st.sampled_from(_TAGS)))
    for name in draw(st.lists(st.sampled_from(_ATTRIBUTES), max_size=3, unique=True)):
        element.set(name, draw(_VALUES))
    if depth < 3:
        for child in draw(st.lists(_trees(depth + 1), max_size=4)):
            element.append(child)
    return element


@settings(max_examples=300, deadline=None)
@given(_trees())
def test_random_trees_give_the_same_elements(tree: etree._Element) -> None:
    root = etree.Element("html")
    root.append(tree)
    assert not _same(root, _pairs())


def test_an_element_tree_goes_to_libxml2() -> None:
    """A whole document (``ElementTree``) or XPath variables are not trafilatura's case: libxml2 answers."""
    tree = etree.ElementTree(lxml_html.fromstring("<div class='footer'><p class='footer'>x</p></div>"))
    for expression in ('.//*[contains(@class, "footer")]', "(.//p)[1]"):
        assert compile_xpath(expression)(tree) == etree.XPath(expression)(tree)
    element = tree.getroot()
    assert compile_xpath(".//p")(element, unused="x") == etree.XPath(".//p")(element, unused="x")  # variables


def test_trafilatura_output_is_unchanged_and_the_library_restored() -> None:
    """extract() through the compiled lists gives trafilatura's text on real pages; outside the
    block, trafilatura's lists hold libxml2's expressions again."""
    shared_data.require()
    from trafilatura import extract, xpaths

    rows = [row for set_name in shared_data.EXTRACTION_SETS for row in shared_data.ground_truth(set_name)]
    for row in rows[::4]:  # a quarter of the ~1,500 pages keeps the test under a minute
        html = row["html"].decode("utf-8", errors="replace")
        plain = extract(html, favor_precision=True, include_comments=False, deduplicate=False)
        assert trafilatura_extract(html, deduplicate=False) == plain, row["page_url"]
    assert all(isinstance(item, etree.XPath) for item in xpaths.OVERALL_DISCARD_XPATH)
    with compiled_xpaths():
        assert all(isinstance(item, CompiledXPath) for item in xpaths.OVERALL_DISCARD_XPATH)
    assert all(isinstance(item, etree.XPath) for item in xpaths.OVERALL_DISCARD_XPATH)
