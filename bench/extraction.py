"""Extraction quality on every ``html_extraction_*`` set: our curate stage's extraction against plain
trafilatura on the same pages.

Scores per page, averaged per set: word-level F1 (lower-cased ``\\w+`` tokens, multiset overlap, as WCXB
scores), and the hit rates of the ``with`` snippets (must appear) and ``without`` snippets (must not).
"ours (recipe)" is what the curate stage keeps as text: the page bytes decoded by our WARC reader
(UTF-8, then cchardet) and extracted with the recipe's settings (FineWeb's: favour_precision,
deduplicate). "ours, recall mode" is the same path with ``favour_precision: false`` and
``deduplicate: false`` in the recipe's ``extraction`` section. "resiliparse" is the DCLM-style
extractor (``curate.extract_resiliparse``: main content, no comments) on the same decoded page;
"resiliparse, whole page" turns its main-content heuristic off. ``pages/s`` is pages per CPU
second of this process for that mode (extraction only, no sandbox), after the set's pages are loaded.

    python -m bench.extraction [--sets html_extraction_aeb ...] [--json out.json]
"""

from __future__ import annotations

# bench/ holds tokenize.py, which would shadow the stdlib module: run from the repo root instead.
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from statistics import mean

import trafilatura

from common.cli import ArgumentParser
from curate.extract import trafilatura_extract
from curate.extract_resiliparse import resiliparse_extract
from curate.warc import decode_payload
from pipelines.recipe import load_recipe
from tests.support import shared_data

WORD = re.compile(r"\w+")
SPACE = re.compile(r"\s+")


def word_f1(predicted: str, expected: str) -> float:
    p, e = Counter(WORD.findall(predicted.lower())), Counter(WORD.findall(expected.lower()))
    if not p and not e:
        return 1.0
    overlap = sum((p & e).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(p.values()), overlap / sum(e.values())
    return 2 * precision * recall / (precision + recall)


def _norm(text: str) -> str:
    return SPACE.sub(" ", text.lower()).strip()


def snippet_rates(predicted: str, with_: list[str], without: list[str]) -> tuple[float | None, float | None]:
    text = _norm(predicted)
    hit = mean(_norm(s) in text for s in with_) if with_ else None
    clean = mean(_norm(s) not in text for s in without) if without else None
    return hit, clean


def reset_dedup_cache() -> None:
    """trafilatura's ``deduplicate`` remembers segments across pages: start each mode clean."""
    from trafilatura import deduplication

    deduplication.LRU_TEST = deduplication.LRUCache(maxsize=deduplication.LRU_SIZE)


def score(extract, rows: list[dict]) -> dict:
    f1s, hits, cleans = [], [], []
    for row in rows:
        text = extract(row) or ""
        if row.get("text"):
            f1s.append(word_f1(text, row["text"]))
        hit, clean = snippet_rates(text, row.get("with") or [], row.get("without") or [])
        if hit is not None:
            hits.append(hit)
        if clean is not None:
            cleans.append(clean)
    return {
        "pages": len(rows),
        "word_f1": round(mean(f1s), 4) if f1s else None,
        "with_hit_rate": round(mean(hits), 4) if hits else None,
        "without_clean_rate": round(mean(cleans), 4) if cleans else None,
    }


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(shared_data.EXTRACTION_SETS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    recipe = load_recipe().curate.extraction
    modes = {
        "plain trafilatura": lambda row: trafilatura.extract(row["html"]),
        "ours (recipe)": lambda row: trafilatura_extract(
            decode_payload(row["html"]) or "", recipe.favour_precision, recipe.deduplicate
        ),
        "ours, recall mode": lambda row: trafilatura_extract(decode_payload(row["html"]) or "", False, False),
        "resiliparse": lambda row: resiliparse_extract(decode_payload(row["html"]) or ""),
        "resiliparse, whole page": lambda row: resiliparse_extract(decode_payload(row["html"]) or "", False),
    }
    results: dict[str, dict] = {}
    print(f"{'set':30} {'mode':24} {'pages':>6} {'word F1':>8} {'with':>6} {'without':>8} {'pages/s':>8}")
    for set_name in args.sets:
        rows = shared_data.ground_truth(set_name)
        for mode, fn in modes.items():
            reset_dedup_cache()
            start = time.process_time()
            res = score(fn, rows)
            res["pages_per_cpu_s"] = round(len(rows) / max(time.process_time() - start, 1e-9), 1)
            results.setdefault(set_name, {})[mode] = res
            fmt = lambda v: "   -  " if v is None else f"{v:6.3f}"  # noqa: E731
            print(
                f"{set_name:30} {mode:24} {res['pages']:>6} {fmt(res['word_f1']):>8} "
                f"{fmt(res['with_hit_rate']):>6} {fmt(res['without_clean_rate']):>8} {res['pages_per_cpu_s']:>8.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
