"""``python -m classifiers.lid_eval --data DIR``: measure language ID on labelled sentences.

Two systems on the same items: ``ours`` is the curate stage's own code path (``FastTextLanguageFilter``
over datatrove ``Document``s in batches, the label it writes to ``metadata["language"]``); ``raw`` is
one plain ``fasttext.predict(k=1)`` call per text with newlines replaced. Both at sentence level and
at paragraph level (five sentences of a language joined). Gold codes are mapped to model labels
(lingua ``nb`` -> ft176 ``no``); languages the model lacks are reported apart, never as errors, and
their items are left out of every other figure (so they cannot lower a precision either).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from datatrove.data import Document

from classifiers.language_filter import FastTextLanguageFilter
from classifiers.lid import bundled_ft176_path, load_fasttext, normalize_label
from classifiers.lid_data import load_labelled, map_languages, paragraphs
from classifiers.metrics import accuracy, macro_f1, per_class
from common.cli import ArgumentParser, integer, one_line
from common.lock import check_not_input

Predict = Callable[[Sequence[str]], list[str]]


def ours(model_path: str, batch_size: int = 64) -> Predict:
    """Labels as the curate stage's language filter writes them."""
    step = FastTextLanguageFilter(languages=None, model_path=model_path, batch_size=batch_size)

    def predict(texts: Sequence[str]) -> list[str]:
        labels = []
        for start in range(0, len(texts), batch_size):
            docs = [Document(text=t, id=str(start + i)) for i, t in enumerate(texts[start : start + batch_size])]
            step.filter_batch(docs)
            labels.extend(doc.metadata["language"] for doc in docs)
        return labels

    return predict


def raw(model_path: str) -> Predict:
    """Top-1 label of a plain fastText call per text (the reference)."""
    model = load_fasttext(model_path)

    def predict(texts: Sequence[str]) -> list[str]:
        out = []
        for text in texts:
            labels, _ = model.predict(text.replace("\n", " "), k=1)
            out.append(normalize_label(labels[0]) if labels else "unknown")
        return out

    return predict


def score_level(gold: list[str], predicted: list[str]) -> dict:
    classes = per_class(gold, predicted)
    return {
        "items": len(gold),
        "accuracy": accuracy(gold, predicted),
        "macro_f1": macro_f1(classes),
        "per_language": {lang: asdict(s) for lang, s in classes.items()},
    }


def evaluate(items: list[tuple[str, str]], model_path: str, systems: dict[str, Predict]) -> dict:
    """Every figure for one level (sentences or paragraphs)."""
    labels = [normalize_label(x) for x in load_fasttext(model_path).get_labels()]
    mapping, missing = map_languages((lang for _, lang in items), labels)
    kept = [(t, mapping[lang]) for t, lang in items if lang in mapping]
    apart = [(t, lang) for t, lang in items if lang not in mapping]
    texts, gold = [t for t, _ in kept], [g for _, g in kept]
    result: dict = {"systems": {}, "unsupported": {}}
    predictions = {}
    for name, predict in systems.items():
        predictions[name] = predict(texts)
        result["systems"][name] = score_level(gold, predictions[name])
    if len(predictions) == 2:
        a, b = predictions.values()
        result["agreement"] = sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else 1.0
    first = next(iter(systems.values()))
    apart_predicted = first([t for t, _ in apart]) if apart else []
    for lang in missing:
        got = Counter(p for (_, g), p in zip(apart, apart_predicted, strict=True) if g == lang)
        result["unsupported"][lang] = {"items": sum(got.values()), "predicted_as": dict(got.most_common(3))}
    result["mapping"] = {k: v for k, v in mapping.items() if k != v}
    return result


def run(data: str | Path, model_path: str | None = None, paragraph_size: int = 5) -> dict:
    model_path = str(model_path or bundled_ft176_path())
    sentences = load_labelled(data)
    systems = {"ours": ours(model_path), "raw": raw(model_path)}
    return {
        "data": str(data),
        "model": model_path,
        "paragraph_size": paragraph_size,
        "sentence": evaluate(sentences, model_path, systems),
        "paragraph": evaluate(paragraphs(sentences, paragraph_size), model_path, systems),
    }


def format_report(report: dict) -> str:
    lines = [f"model: {report['model']}", "", f"{'level':10} {'system':6} {'items':>7} {'accuracy':>9} {'macro-F1':>9}"]
    for level in ("sentence", "paragraph"):
        for name, s in report[level]["systems"].items():
            lines.append(f"{level:10} {name:6} {s['items']:>7} {s['accuracy']:>9.4f} {s['macro_f1']:>9.4f}")
        if "agreement" in report[level]:
            lines.append(f"{level:10} ours/raw top-1 agreement: {report[level]['agreement']:.4%}")
    lines += ["", "per language (accuracy / F1), ours | raw"]
    heads = ("sentence ours", "sentence raw", "paragraph ours", "paragraph raw")
    lines.append(f"{'lang':6} {'n sent':>6} " + " ".join(f"{h:>15}" for h in heads))
    sent, para = report["sentence"]["systems"], report["paragraph"]["systems"]
    for lang, s in sent["ours"]["per_language"].items():
        cells = []
        for level in (sent, para):
            for name in ("ours", "raw"):
                pl = level.get(name, {}).get("per_language", {}).get(lang)
                cells.append(f"{pl['accuracy']:.3f} / {pl['f1']:.3f}" if pl else "-")
        lines.append(f"{lang:6} {s['n']:>6} " + " ".join(f"{c:>15}" for c in cells))
    unsupported = report["sentence"]["unsupported"]
    if unsupported:
        lines += ["", "languages the model lacks (not counted above): items, most frequent predictions"]
        for lang, u in unsupported.items():
            top = ", ".join(f"{k}={v}" for k, v in u["predicted_as"].items())
            lines.append(f"{lang:6} {u['items']:>6}  {top}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m classifiers.lid_eval", description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with sentences.jsonl.gz, or a .jsonl(.gz) file")
    parser.add_argument("--model", default=None, help="fastText LID model (default: bundled lid.176.ftz)")
    parser.add_argument("--out", default="lid_eval.json", help="JSON report path")
    parser.add_argument("--paragraph-size", type=integer(1, 10_000), default=5, help="sentences per paragraph")
    args = parser.parse_args(argv)
    try:
        if not Path(args.out).parent.is_dir() or Path(args.out).is_dir():  # found after the whole evaluation
            raise ValueError(f"--out {args.out}: not a file in an existing folder")
        # the report written over the labelled sentences it read (--out equal to --data exited 0)
        check_not_input(args.out, {"--data file": args.data, "--model": args.model}, {"--data folder": args.data})
        report = run(args.data, args.model, args.paragraph_size)
    except (OSError, ValueError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print(format_report(report))
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
