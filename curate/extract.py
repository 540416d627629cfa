"""Main-text extraction with trafilatura, FineWeb's settings, a per-page time limit and an optional
cheap language pre-check that skips trafilatura on pages confidently outside the target languages.

Extraction runs in datatrove's ``ExtractorSandbox`` (a child process that is killed on timeout), so
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

# "up to the first -->" and "up to the first closing tag" as unrolled loops: the same matches as the
# lazy ``<!--.*?-->`` and ``<(script|...)...>.*?</\1\s*>``, without a closing-tag test at every character
_COMMENT = re.compile(r"<!--[^-]*(?:-(?!->)[^-]*)*-->")
_SCRIPT = re.compile(r"<(script|style|noscript|template|svg)\b[^>]*>[^<]*(?:<(?!/\1\s*>)[^<]*)*</\1\s*>", re.I)
_TAG = re.compile(r"<[^>]{0,2000}>")
_SPACE = re.compile(r"\s+")
_ENTITY_FREE_SPACE = re.compile(r"[ \t\n\f]")  # no character reference holds one (html.unescape's rule)
PRECHECK_HTML_CHARS = 300_000
PRECHECK_TEXT_CHARS = 3_000  # fastText's cost grows with length; 3,000 characters decide a language


def _visible(text: str) -> str:
    return _SPACE.sub(" ", html_lib.unescape(text)).strip()


def rough_text(html: str) -> str:
    """Visible-ish text of a page by regex (no parse): enough for a language guess, not for output.

    Unescaping and collapsing spaces stop early: cut before a space that no character reference
    spans, a prefix's visible text is a prefix of the whole's, so once it is long enough it decides."""
    head = html[:PRECHECK_HTML_CHARS]
    text = _TAG.sub(" ", _SCRIPT.sub(" ", _COMMENT.sub(" ", head)))
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
