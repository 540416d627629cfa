"""Keep/drop parity of ``filters.dclm`` with DCLM's own heuristics, on real pages (a one-off check, not a test).

    python -m bench.dclm_parity --reference DCLM_CHECKOUT --reference-python PYTHON [--data ../shared/data]

DCLM's code is not part of this project: point ``--reference`` at a checkout of mlfoundations/dclm and
``--reference-python`` at an interpreter with its requirements (uniseg, retrie, nltk, justext, bs4,
transformers, fasttext; kenlm is stubbed when absent). That interpreter runs DCLM's functions in the order of
``baselines/baselines_configs/dclm_baseline_refinedweb.yaml`` (from ``url_removal_modifier`` to
``word_removal_ratio_filter``; the URL filters and the language filter, done by other steps here, left out)
over the same pages as ``filters.dclm.judge``. Pages: every HTML page of ``shared/data``'s extraction sets
through resiliparse (DCLM's extractor, main content), the WARC sample's HTML responses, and the clean texts
(articles, Common Crawl samples, plagiarised answers). Prints agreement, the kept texts' agreement, the
disagreements by DCLM's dropping step, and the seconds each side took.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from curate.extract_resiliparse import resiliparse_extract
from dedup.evaluation import real_texts
from filters.dclm import judge

ROOT = Path(__file__).resolve().parents[1]

REFERENCE_DRIVER = r"""
import importlib.util, json, sys, time, types
from functools import partial
sys.path[:0] = [".", "baselines"]
if importlib.util.find_spec("kenlm") is None:  # imported by DCLM's package, used by none of these steps
    sys.modules["kenlm"] = types.ModuleType("kenlm")
from baselines.mappers.modifiers import (url_removal_modifier, newline_removal_modifier, uppercase_ratio_line_modifier,
    numeric_ratio_line_modifier, counter_line_modifier, line_length_modifier, substring_line_modifier)
from baselines.mappers.filters.content_filters import (page_length_filter, word_length_filter, symbol_ratio_filter,
    bullet_count_filter, ellipsis_count_filter, alphabetic_word_ratio_filter, stop_word_filter,
    massive_web_repetition_filters, word_removal_ratio_filter)
from baselines.mappers.enrichers.enrichers import word_counter_enricher

steps = [
    ("url_removal_modifier", url_removal_modifier()),
    ("newline_removal_modifier", newline_removal_modifier(max_consecutive=2)),
    ("page_length_filter", partial(page_length_filter, length_type="word", min_length=50, max_length=100000,
                                   ignore_punctuation=True)),
    ("word_length_filter", partial(word_length_filter, min_length=3, max_length=10)),
    ("symbol_ratio_filter", partial(symbol_ratio_filter, max_symbol_to_word_ratio=0.1)),
    ("bullet_count_filter", partial(bullet_count_filter, max_bullet_start_ratio=0.9)),
    ("ellipsis_count_filter", partial(ellipsis_count_filter, max_ellipsis_end_ratio=0.3)),
    ("alphabetic_word_ratio_filter", partial(alphabetic_word_ratio_filter, max_ratio=0.2)),
    ("stop_word_filter", partial(stop_word_filter, count_unique=False, min_stop_word=2)),
    ("massive_web_repetition_filters", massive_web_repetition_filters),
    ("word_counter_enricher", partial(word_counter_enricher, key="previous_word_count")),
    ("uppercase_ratio_line_modifier", partial(uppercase_ratio_line_modifier, max_ratio=0.5)),
    ("numeric_ratio_line_modifier", partial(numeric_ratio_line_modifier, max_ratio=0.999999)),
    ("counter_line_modifier", counter_line_modifier()),
    ("line_length_modifier", partial(line_length_modifier, min_length=2)),
    ("substring_line_modifier", substring_line_modifier(max_length=10, banlist="items in cart",
                                                        remove_substring_only=True)),
    ("substring_line_modifier", substring_line_modifier(max_length=10, banlist="Read more...", location="suffix",
                                                        remove_substring_only=True)),
    ("substring_line_modifier", substring_line_modifier(max_length=10, banlist="Sign-in", location="prefix",
                                                        remove_substring_only=True)),
    ("word_removal_ratio_filter", partial(word_removal_ratio_filter, prev_word_count_key="previous_word_count",
                                          max_removed_ratio=0.05)),
]
start = time.process_time()
out = []
for line in open(sys.argv[1]):
    page = {"text": json.loads(line)["text"]}
    dropped = None
    for name, step in steps:
        pages = step(page)
        if not pages:
            dropped = name
            break
        page = pages[0]
    out.append({"keep": dropped is None, "step": dropped, "text": page["text"] if dropped is None else None})
print(json.dumps({"seconds": time.process_time() - start, "results": out}))
"""


def pages(data: Path) -> list[str]:
    """Real pages: extraction sets' HTML through resiliparse, the WARC sample's HTML, clean texts."""
    texts = []
    for html in sorted(data.glob("html_extraction_*/html/*.html.gz")):
        text = resiliparse_extract(gzip.decompress(html.read_bytes()).decode("utf-8", "replace"))
        if text:
            texts.append(text)
    sample = ROOT / "pipelines" / "sample" / "sample.warc.gz"
    if sample.exists():
        from fastwarc.warc import ArchiveIterator, WarcRecordType

        with sample.open("rb") as f:
            for record in ArchiveIterator(f, record_types=WarcRecordType.response):
                body = record.reader.read().decode("utf-8", "replace")
                if "<html" in body[:2000].lower() and (text := resiliparse_extract(body)):
                    texts.append(text)
    return texts + real_texts(data)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reference", required=True, type=Path, help="a checkout of mlfoundations/dclm")
    p.add_argument("--reference-python", required=True, help="an interpreter with DCLM's requirements")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    a = p.parse_args()
    texts = pages(a.data)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
        f.flush()
        proc = subprocess.run(
            [a.reference_python, "-c", REFERENCE_DRIVER, f.name], cwd=a.reference, capture_output=True, text=True
        )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    reference = json.loads(proc.stdout.strip().splitlines()[-1])
    start = time.process_time()
    ours = [judge(t) for t in texts]
    our_seconds = time.process_time() - start
    agree = same_text = 0
    misses: Counter = Counter()
    for (verdict, _, edited), ref in zip(ours, reference["results"], strict=True):
        keep = verdict is True
        if keep == ref["keep"]:
            agree += 1
            same_text += keep and edited == ref["text"]
        else:
            misses[(ref["step"] or "kept by DCLM", "kept" if keep else verdict[1])] += 1
    kept = sum(r["keep"] for r in reference["results"])
    print(f"pages {len(texts)}, DCLM keeps {kept}; agreement {agree / len(texts):.4f} ({agree}/{len(texts)})")
    print(f"kept texts identical: {same_text}/{kept}")
    theirs = reference["seconds"]
    print(f"CPU seconds: DCLM {theirs:.2f}, ours {our_seconds:.2f} ({theirs / our_seconds:.1f}x)")
    for (step, ours_reason), n in misses.most_common():
        print(f"  disagree {n}: DCLM {step}, ours {ours_reason}")


if __name__ == "__main__":
    main()
