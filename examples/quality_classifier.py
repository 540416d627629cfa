"""``python -m examples.quality_classifier --data ../shared/data --out DIR``: the worked example.

Builds a quality-classifier training set from the project's shared real data and trains on it:

- positives: WikiText-2 articles (detokenized, one document per top-level section, grouped by
  article) and the clean article texts of every ``html_extraction_*`` ground truth;
- negatives: raw web text (all visible text of every HTML page in ``warc_samples``) and the
  documents the heuristic rules (Gopher repetition and quality, C4, FineWeb) remove from those pages'
  trafilatura extractions and from ``cc_web_text_samples``;
- calibration (for top-fraction thresholds): the extractions the rules keep, i.e. what the
  classifier step sees in the curate stage.

Everything is limited to English by the curate stage's own LID rule (en > 0.65), so the classifier
learns quality rather than language. Texts in both classes are dropped from both.
Writes ``DIR/{positive,negative,calibration}.jsonl`` and ``DIR/quality.bin`` (+ ``.json``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from classifiers.lid import LanguageIdentifier
from classifiers.quality_model import fasttext_line
from classifiers.text_io import TextDoc
from classifiers.train_quality import TrainConfig, format_report, train
from classifiers.wikitext import sections
from common.cli import ArgumentParser
from common.config import config_from_args

EXTRACTION_SETS = ("html_extraction_aeb", "html_extraction_trafilatura", "html_extraction_readability",
                   "html_extraction_wcxb")  # fmt: skip
MIN_WORDS = 20
# a few hundred documents, not DCLM's millions: more passes and a larger step (fastText's advice for
# small sets), fixed before looking at held-out figures
EXAMPLE_EPOCH = 25
EXAMPLE_LR = 0.5


def wikipedia(data: Path) -> Iterator[dict]:
    for line in (data / "wikitext2_articles" / "articles_valid.jsonl").read_text().splitlines():
        article = json.loads(line)
        for text in sections(article["text"]):
            yield {"text": text, "group": f"wiki:{article['title']}", "source": "wikitext2"}


def ground_truth(data: Path) -> Iterator[dict]:
    for name in EXTRACTION_SETS:
        path = data / name / "ground_truth.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("text"):
                yield {"text": row["text"], "group": f"{name}:{row['id']}", "source": name}


def warc_pages(data: Path) -> Iterator[tuple[str, str]]:
    """(url, html) of every HTML response in ``warc_samples``."""
    from curate.warc import iter_warc_records, record_to_dict

    folder = data / "warc_samples"
    for path in sorted(folder.glob("*.warc.gz")):
        if path.name.endswith((".wat.gz", ".wet.gz")):
            continue
        with open(path, "rb") as f:
            for record in iter_warc_records(f):
                page = record_to_dict(record, lambda *_: None)
                if page and page["text"]:
                    yield f"{path.name}:{page['url']}", page["text"]


@functools.cache
def curate_config():
    """The bundled recipe's curate section (its rules are the curate stage's)."""
    from pipelines.recipe import load_recipe

    return load_recipe().curate


def rule_verdict(text: str, tokenizer) -> tuple[str | None, str]:
    """(reason of the first rule group that removes ``text`` or None, the C4-edited text)."""
    from filters.quality import compute_signals

    config = curate_config()
    with tokenizer.batch():
        signals, edited = compute_signals(text, tokenizer, config.signals)
    for rule in config.rules.ordered():
        verdict = rule.check(signals)
        if verdict is not True:
            return f"{rule.FAMILY}:{verdict[1] if isinstance(verdict, tuple) else 'failed'}", edited
    return None, edited


def web_documents(data: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(raw page texts, rule-removed documents, rule-kept documents) from the web samples."""
    import trafilatura

    from filters.words import WordTokenizer

    tokenizer = WordTokenizer("en")
    raw, removed, kept = [], [], []
    candidates: list[tuple[str, str, str]] = []  # (text, group, source)
    for group, html in warc_pages(data):
        raw.append({"text": trafilatura.html2txt(html) or "", "group": group, "source": "warc_raw"})
        extracted = trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=True)
        if extracted:
            candidates.append((extracted, group, "warc_extracted"))
    cc = data / "cc_web_text_samples" / "docs.jsonl"
    if cc.is_file():
        for line in cc.read_text().splitlines():
            row = json.loads(line)
            candidates.append((row["text"], f"cc:{row['id']}", "cc_web_text"))
    english_only = english([{"text": t, "group": g, "source": s} for t, g, s in candidates])
    for doc in english_only:
        reason, edited = rule_verdict(doc["text"], tokenizer)
        if reason:
            removed.append({**doc, "source": f"{doc['source']}_removed", "reason": reason})
        elif edited.strip():
            kept.append({**doc, "text": edited, "source": f"{doc['source']}_kept"})
    return raw, removed, kept


def english(docs: list[dict], threshold: float = 0.65) -> list[dict]:
    """The documents the curate stage's language filter keeps for ``en`` (and long enough to judge)."""
    docs = [d for d in docs if len(d["text"].split()) >= MIN_WORDS]
    predictions = LanguageIdentifier().predict([d["text"] for d in docs])
    return [d for d, p in zip(docs, predictions, strict=True) if p.score_of("en") > threshold]


def drop_conflicts(positive: list[dict], negative: list[dict]) -> tuple[list[dict], list[dict]]:
    """Remove exact duplicates within a class and texts that occur in both classes."""
    key = lambda d: fasttext_line(d["text"])  # noqa: E731
    both = {key(d) for d in positive} & {key(d) for d in negative}

    def unique(docs: list[dict]) -> list[dict]:
        seen: set[str] = set()
        out = []
        for d in docs:
            k = key(d)
            if k not in both and k not in seen:
                seen.add(k)
                out.append(d)
        return out

    return unique(positive), unique(negative)


def build(data: Path, out: Path) -> dict[str, list[dict]]:
    positive = english(list(wikipedia(data)) + list(ground_truth(data)))
    raw, removed, kept = web_documents(data)
    negative = english(raw) + removed
    positive, negative = drop_conflicts(positive, negative)
    out.mkdir(parents=True, exist_ok=True)
    sets = {"positive": positive, "negative": negative, "calibration": kept}
    for name, docs in sets.items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return sets


def to_docs(rows: list[dict]) -> list[TextDoc]:
    return [TextDoc(r["text"], r["group"]) for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m examples.quality_classifier", description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    p.add_argument("--out", required=True)
    p.add_argument("--dim", type=int, default=TrainConfig.dim)
    p.add_argument("--epoch", type=int, default=EXAMPLE_EPOCH)
    p.add_argument("--lr", type=float, default=EXAMPLE_LR)
    p.add_argument("--bucket", type=int, default=TrainConfig.bucket)
    p.add_argument("--quantize", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    if not (data / "wikitext2_articles").is_dir():
        print(f"error: shared data not found at {data}", file=sys.stderr)
        return 2
    sets = build(data, out)
    for name, docs in sets.items():
        counts = Counter(d["source"] for d in docs)
        print(f"{name}: {len(docs)} documents (" + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) + ")")
    config = config_from_args(TrainConfig, args, threads=1)  # one thread: the same figures on every run
    calibration = to_docs(sets["calibration"]) or None
    report = train(to_docs(sets["positive"]), to_docs(sets["negative"]), out / "quality.bin", config, calibration)
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
