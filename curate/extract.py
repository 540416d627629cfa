"""Main-text extraction with trafilatura, FineWeb's settings, a per-page time limit and an optional
cheap language pre-check that skips trafilatura on pages confidently outside the target languages.

Extraction runs in a sandbox child process (``common.sandbox``) killed after its CPU-time limit, so
a pathological page can stall neither the task nor its memory; the page reaches the child through
shared memory (``common.sandbox.SharedTextSandbox``). trafilatura runs with its XPath lists
compiled to Python (``curate.xpath_subset``): the same output, in about 60 % of the time.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.logging import logger

from classifiers.lid import LanguageIdentifier
from common.sandbox import SharedTextSandbox, run_sandboxed
from curate.xpath_subset import compile_or_keep

# Comments and raw-text elements are cut by searching for the opener and then for its closer, each
# scan starting where the last one ended: linear in the page. (The unrolled regexes they replace matched
# the same text, but retried the closer search at every unclosed ``<!--`` or ``<script>``: 75,000
# unclosed ``<!--`` cost ~10 minutes, outside the extraction sandbox.) An unclosed opener means no
# later opener of its kind can close either, which is what keeps the scans from repeating.
_RAW_TEXT_NAMES = ("script", "style", "noscript", "template", "svg")
_CLOSERS = {name: re.compile(rf"</{name}\s*>", re.I) for name in _RAW_TEXT_NAMES}
_TAG = re.compile(r"<[^>]{0,2000}>")
_SPACE = re.compile(r"\s+")
_ENTITY_FREE_SPACE = re.compile(r"[ \t\n\f]")  # no character reference holds one (html.unescape's rule)
PRECHECK_HTML_CHARS = 300_000
PRECHECK_TEXT_CHARS = 3_000  # fastText's cost grows with length; 3,000 characters decide a language


def _visible(text: str) -> str:
    return _SPACE.sub(" ", html_lib.unescape(text)).strip()


def _without_comments(html: str) -> str:
    """Each ``<!--`` up to the first ``-->`` after it replaced by a space (the lazy ``<!--.*?-->``)."""
    parts, pos = [], 0
    while (start := html.find("<!--", pos)) >= 0 and (end := html.find("-->", start + 4)) >= 0:
        parts += (html[pos:start], " ")
        pos = end + 3
    parts.append(html[pos:])
    return "".join(parts)


def _openers(names: Sequence[str]) -> re.Pattern[str]:
    return re.compile(rf"<({'|'.join(names)})\b", re.I)


def _without_raw_text_elements(html: str) -> str:
    """Each ``<script ...>`` (style, noscript, template, svg) up to its first closing tag replaced by a
    space (the lazy ``<(script|...)\\b[^>]*>.*?</\\1\\s*>``). The end of the opening tag is looked up
    once per ``>`` rather than once per opener, and a kind that stays unclosed is not searched again."""
    names = list(_RAW_TEXT_NAMES)
    openers = _openers(names)
    parts, pos, search_from, tag_end = [], 0, 0, -1
    while (opener := openers.search(html, search_from)) is not None:
        if tag_end < opener.end():
            tag_end = html.find(">", opener.end())
            if tag_end < 0:  # no tag is closed after this point: no opener can match
                break
        name = opener.group(1).lower()
        closer = _CLOSERS[name].search(html, tag_end + 1)
        if closer is None:
            names.remove(name)
            if not names:
                break
            openers = _openers(names)
            search_from = opener.start() + 1
            continue
        parts += (html[pos : opener.start()], " ")
        pos = search_from = closer.end()
    parts.append(html[pos:])
    return "".join(parts)


def rough_text(html: str) -> str:
    """Visible-ish text of a page by regex (no parse): enough for a language guess, not for output.

    Unescaping and collapsing spaces stop early: cut before a space that no character reference
    spans, a prefix's visible text is a prefix of the whole's, so once it is long enough it decides."""
    head = html[:PRECHECK_HTML_CHARS]
    text = _TAG.sub(" ", _without_raw_text_elements(_without_comments(head)))
    cut = _ENTITY_FREE_SPACE.search(text, 2 * PRECHECK_TEXT_CHARS)
    if cut is not None:
        visible = _visible(text[: cut.start()])
        if len(visible) >= PRECHECK_TEXT_CHARS:
            return visible[:PRECHECK_TEXT_CHARS]
    return _visible(text)[:PRECHECK_TEXT_CHARS]


@cache
def _compiled_expression_lists() -> list[tuple[list, list, list]]:
    """trafilatura's expression lists (``trafilatura.xpaths``): each list, its items, their compiled versions."""
    from lxml.etree import XPath
    from trafilatura import xpaths

    return [
        (items, list(items), [compile_or_keep(item) for item in items])
        for items in vars(xpaths).values()
        if isinstance(items, list) and items and all(isinstance(item, XPath) for item in items)
    ]


@contextmanager
def compiled_xpaths() -> Iterator[None]:
    """trafilatura with its pruning expressions compiled (``curate.xpath_subset``: the same elements,
    several times faster), only inside the block: the lists are shared module objects, so they are
    swapped in place and restored, and other callers of trafilatura in the process see it unchanged."""
    lists = _compiled_expression_lists()
    try:
        for items, _, compiled in lists:
            items[:] = compiled
        yield
    finally:
        for items, original, _ in lists:
            items[:] = original


def trafilatura_extract(html: str, favour_precision: bool = True, deduplicate: bool = True) -> str | None:
    """FineWeb's call: ``extract(favor_precision=True, include_comments=False, deduplicate=True)``."""
    from trafilatura import extract

    with compiled_xpaths():
        return extract(html, favor_precision=favour_precision, include_comments=False, deduplicate=deduplicate)


class _Extract:
    """Picklable extraction callable for the sandbox process."""

    def __init__(self, favour_precision: bool, deduplicate: bool):
        self.favour_precision = favour_precision
        self.deduplicate = deduplicate

    def __call__(self, html: str) -> str | None:
        return trafilatura_extract(html, self.favour_precision, self.deduplicate)


class MainTextExtractor(PipelineStep):
    """HTML -> main text. Dropped pages go to the exclusion writer with their reason (text emptied).

    Args:
        timeout: seconds per page before the sandbox process is killed (datatrove's default is 1).
        max_html_bytes: larger pages are not parsed at all (reason ``too_large``).
        precheck_languages: target languages; when set, a page whose rough text is classified as
            another language with probability >= ``precheck_threshold`` skips trafilatura and is
            dropped with reason ``precheck`` (written with its rough text and language).
    """

    name = "extraction"
    type = "🛢 - EXTRAC"

    def __init__(
        self,
        favour_precision: bool = True,
        deduplicate: bool = True,
        timeout: float = 1.0,
        max_html_bytes: int = 10_000_000,
        precheck_languages: Sequence[str] | None = None,
        precheck_threshold: float = 0.9,
        lid_model_path: str | None = None,
        exclusion_writer=None,
    ):
        super().__init__()
        self.extract_fn = _Extract(favour_precision, deduplicate)
        self.timeout = timeout
        self.max_html_bytes = max_html_bytes
        self.precheck_languages = tuple(precheck_languages) if precheck_languages else None
        self.precheck_threshold = precheck_threshold
        self.identifier = LanguageIdentifier(lid_model_path) if self.precheck_languages else None
        self.exclusion_writer = exclusion_writer

    def _precheck_rejects(self, doc: Document) -> bool:
        if not self.precheck_languages:
            return False
        text = rough_text(doc.text)
        if not text:
            return False
        label, score = self.identifier.predict_one(text).best
        if label in self.precheck_languages or score < self.precheck_threshold:
            return False
        doc.text = text
        doc.metadata.update(language=label, language_score=score, filter_reason="precheck")
        return True

    def _drop(self, doc: Document, reason: str, rank: int) -> None:
        self.stat_update("dropped", f"dropped_{reason}")
        if self.exclusion_writer is not None:
            doc.text = ""
            doc.metadata["filter_reason"] = reason
            self.exclusion_writer.write(doc, rank)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from contextlib import ExitStack

        _compiled_expression_lists()  # trafilatura imported and its expressions compiled before the sandbox forks,
        # so a restarted child is ready at once

        warned = False
        with ExitStack() as stack:
            if self.exclusion_writer is not None:
                stack.enter_context(self.exclusion_writer)
            sandbox = stack.enter_context(SharedTextSandbox(timeout=self.timeout))
            for doc in data:
                self.stat_update("total")
                with self.track_time():
                    if len(doc.text) > self.max_html_bytes:
                        self._drop(doc, "too_large", rank)
                        continue
                    if self._precheck_rejects(doc):
                        self.stat_update("dropped", "dropped_precheck")
                        if self.exclusion_writer is not None:
                            self.exclusion_writer.write(doc, rank)
                        continue
                    try:
                        text, failure = run_sandboxed(sandbox, doc.text, self.extract_fn)
                    except Exception as err:  # trafilatura raised on this page
                        if not warned:
                            logger.warning(f"extraction error on {doc.metadata.get('url')}: {err}")
                            warned = True
                        self._drop(doc, "extraction_error", rank)
                        continue
                if failure:
                    self._drop(doc, failure, rank)
                    continue
                if not text:
                    self._drop(doc, "empty", rank)
                    continue
                doc.text = text
                self.stat_update("forwarded")
                yield doc
