"""Language-ID speed: our curate LID step against datatrove's ``LanguageFilter``, same documents.

Documents: (1) the main text trafilatura extracts (FineWeb settings) from every HTML page of the
``html_extraction_*`` sets and ``warc_samples``, i.e. what the curate stage's LID step sees, and
(2) lingua paragraphs (five labelled sentences joined; short, 67 languages). Both sides use the
bundled ``lid.176.ftz`` and ``languages=["en"]``; model loading is outside the timing. Single
process, BLAS limited to one thread: documents per second per core, timed in CPU seconds of this
process (``time.process_time``) so that other jobs on a shared machine do not count against either side.

Runs per repetition, in rotating order: datatrove (one ``filter`` call per document, k=-1);
ours with fastText's own predict (batches of 64); ours (``classifiers.ft_predict``) with its word
cache emptied first ("cold": every word of the set computed inside the timing); with the cache
filled from the other half of the set only (each half timed in turn: words of documents it has not
seen are still new); and again on the warm cache (every word cached: the upper bound). Prints
medians, ratios to datatrove, and whether every label and keep/drop decision is identical to
datatrove's.

    python -m bench.lid [--repeats 5] [--sets extracted paragraphs] [--json out.json]
"""

# ruff: noqa: E402  (the BLAS thread limits must be set before numpy is imported)
from __future__ import annotations

import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import json
import time
from collections.abc import Callable
from statistics import median

from datatrove.data import Document

from classifiers.ft_predict import load_predictor
from classifiers.language_filter import FastTextLanguageFilter
from classifiers.lid import bundled_ft176_path
from classifiers.lid_data import load_labelled, paragraphs
from common.cli import ArgumentParser
from tests.support import shared_data
from tests.support.datatrove_reference import reference_language_filter


def extracted_texts() -> list[str]:
    """trafilatura main text of every HTML page in the shared data (the curate LID step's input)."""
    import trafilatura

    from curate.warc import iter_warc_records, record_to_dict

    pages = [row["html"] for name in shared_data.EXTRACTION_SETS for row in shared_data.ground_truth(name)]
    for path in shared_data.warc_sample_files():
        with open(path, "rb") as f:
            for record in iter_warc_records(f):
                page = record_to_dict(record, lambda *_: None)
                if page:
                    pages.append(page["text"])
    texts = []
    for html in pages:
        if isinstance(html, bytes):
            html = html.decode("utf-8", "replace")
        text = trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=True)
        if text:
            texts.append(text)
    return texts


def paragraph_texts() -> list[str]:
    folder = shared_data.shared_data_dir() / "langid_lingua_sentences"
    return [t for t, _ in paragraphs(load_labelled(folder))]


def run_datatrove(docs: list[Document]) -> list:
    step = reference_language_filter(["en"])
    return [step.filter(doc) for doc in docs]


def run_ours(docs: list[Document], fast: bool, cold: bool) -> list:
    step = FastTextLanguageFilter(languages=["en"], fast=fast)
    if fast and cold:
        load_predictor(step.identifier.model_path).clear_cache()  # empty the word cache: every word is new
    out = []
    for start in range(0, len(docs), step.batch_size):
        out.extend(step.filter_batch(docs[start : start + step.batch_size]))
    return out


def run_ours_other_half(docs: list[Document]) -> tuple[float, list]:
    """Each half timed with the word cache filled by the other half only (untimed): a worker that
    has seen other documents of the same kind, but none of these."""
    half = len(docs) // 2
    elapsed, verdicts = 0.0, [None] * len(docs)
    for timed_part, other in ((slice(0, half), slice(half, None)), (slice(half, None), slice(0, half))):
        run_ours([Document(text=d.text, id=d.id) for d in docs[other]], fast=True, cold=True)
        start = time.process_time()
        verdicts[timed_part] = run_ours(docs[timed_part], fast=True, cold=False)
        elapsed += time.process_time() - start
    return elapsed, verdicts


def timed(fn: Callable[[list[Document]], list], texts: list[str]) -> tuple[float, list[Document], list]:
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    if fn is run_ours_other_half:
        elapsed, verdicts = fn(docs)
        return elapsed, docs, verdicts
    start = time.process_time()
    verdicts = fn(docs)
    return time.process_time() - start, docs, verdicts


def kept(verdict) -> bool:
    return verdict[0] if isinstance(verdict, tuple) else bool(verdict)


def bench_set(texts: list[str], repeats: int) -> dict:
    jobs: dict[str, Callable[[list[Document]], list]] = {
        "datatrove LanguageFilter": run_datatrove,
        "ours, fastText predict": lambda d: run_ours(d, fast=False, cold=False),
        "ours (cold cache)": lambda d: run_ours(d, fast=True, cold=True),
        "ours (cache of other half)": run_ours_other_half,
        "ours (warm cache)": lambda d: run_ours(d, fast=True, cold=False),
    }
    names = list(jobs)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    mismatches: dict[str, dict[str, float]] = {}
    load_predictor(str(bundled_ft176_path()))  # parse the model outside the timing
    run_datatrove([Document(text="warm up", id="0")])
    for rep in range(repeats):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        if order[0] == "ours (warm cache)":  # warm must follow a run that filled the cache
            order = order[1:] + order[:1]
        results = {}
        for name in order:
            elapsed, docs, verdicts = timed(jobs[name], texts)
            seconds[name].append(elapsed)
            results[name] = (docs, verdicts)
        ref_docs, ref_verdicts = results[names[0]]
        for name in names[1:]:
            docs, verdicts = results[name]
            labels = sum(a.metadata["language"] != b.metadata["language"] for a, b in zip(ref_docs, docs, strict=True))
            decisions = sum(kept(a) != kept(b) for a, b in zip(ref_verdicts, verdicts, strict=True))
            diff = max(
                abs(a.metadata["language_score"] - b.metadata["language_score"])
                for a, b in zip(ref_docs, docs, strict=True)
            )
            m = mismatches.setdefault(name, {"labels": 0, "decisions": 0, "max_score_diff": 0.0})
            m["labels"] += labels
            m["decisions"] += decisions
            m["max_score_diff"] = max(m["max_score_diff"], diff)
    base = median(seconds[names[0]])
    return {
        "documents": len(texts),
        "mean_chars": sum(map(len, texts)) / max(len(texts), 1),
        "runs": {
            name: {
                "seconds": s,
                "docs_per_s": len(texts) / median(s),
                "ratio_to_datatrove": base / median(s),
                **({"mismatches": mismatches[name]} if name in mismatches else {}),
            }
            for name, s in seconds.items()
        },
    }


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sets", nargs="+", default=["extracted", "paragraphs"], choices=["extracted", "paragraphs"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    loaders = {"extracted": extracted_texts, "paragraphs": paragraph_texts}
    report = {"repeats": args.repeats, "sets": {}}
    for name in args.sets:
        texts = loaders[name]()
        result = bench_set(texts, args.repeats)
        report["sets"][name] = result
        print(f"\n{name}: {result['documents']} documents, {result['mean_chars']:.0f} characters on average")
        print(f"{'run':28} {'docs/s/core':>12} {'x datatrove':>12}  identical to datatrove")
        for run, r in result["runs"].items():
            m = r.get("mismatches")
            same = (
                "(reference)"
                if m is None
                else f"labels: {m['labels'] == 0}, decisions: {m['decisions'] == 0}, "
                f"max |score diff| {m['max_score_diff']:.1e}"
            )
            print(f"{run:28} {r['docs_per_s']:>12.0f} {r['ratio_to_datatrove']:>11.2f}x  {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
