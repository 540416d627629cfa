"""A local Common Crawl mirror (``crawl-data/<CRAWL>/warc.paths.gz`` plus WARCs) for crawl-id tests."""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.support.warc_writer import Page, write_pages

ARTICLE = (
    "<html><head><title>{t}</title></head><body><article><h1>{t}</h1>"
    + "<p>{t}: the committee met on Tuesday to discuss the plans for the new library, and the members "
    "agreed that the building should open to the public before the end of the year.</p>"
    + "<p>Work on the {t} site will start in the spring. The architects said that the design uses wood "
    "and glass, and that the reading rooms will face the park to the south of the town.</p>"
    + "<p>Local schools near {t} have asked for a room for classes, and the council has said it will consider "
    "the request at its next meeting, which is planned for the first week of the month.</p>"
    + "<p>The budget for {t} was set last year. It has not changed, the treasurer said, "
    "although the price of steel has gone up and some of the work may have to wait.</p>" + "</article></body></html>"
)


def write_mirror(base: Path, crawl: str, n_files: int) -> None:
    rel = [f"crawl-data/{crawl}/segments/1700000000.{i}/warc/part-{i:05d}.warc.gz" for i in range(n_files)]
    for i, path in enumerate(rel):
        pages = [
            Page(f"https://site{i}.example/story-{j}", ARTICLE.format(t=f"Story {i}-{j}").encode()) for j in range(12)
        ]
        write_pages(pages, base / path)
    listing = base / "crawl-data" / crawl / "warc.paths.gz"
    listing.write_bytes(gzip.compress(("\n".join(rel) + "\n").encode()))
