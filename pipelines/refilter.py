"""``python -m pipelines.refilter RUN --recipe NEW.yaml``: re-apply rule thresholds to a finished run.

Signals are stored beside the text, so a different threshold needs no extraction, no language ID and
no tokenization: every document that reached the rules (``curated/`` plus ``removed/<rule>/``) is
judged again by the new recipe's rules, in FineWeb's order. Documents that newly pass get C4's line
edit and PII formatting, as in the curate stage. The new output goes to ``RUN/refilter/<name>/``.

What a threshold change cannot express (C4's line-level options, stop words, the language model) is
part of ``signals``/``language`` and needs a new curate run; this command says so when they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.data import Document
from datatrove.pipeline.formatters import PIIFormatter

from curate.parquet import AtomicParquetWriter
from filters.signals import c4_lines
from filters.words import WordTokenizer
from pipelines.curate import curated_schema
from pipelines.recipe import Recipe, RecipeError, load_recipe

RULE_STEPS = ("gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality")


def _documents(table: pa.Table) -> list[Document]:
    docs = []
    for row in table.to_pylist():
        text, doc_id = row.pop("text"), row.pop("id")
        docs.append(Document(text=text or "", id=doc_id, metadata=row))
    return docs


def load_judged(run: Path) -> list[tuple[str, Document]]:
    """``(origin, document)`` for every document the rules saw: ``curated`` or the rule that removed it."""
    out: list[tuple[str, Document]] = []
    sources = [("curated", run / "curated")] + [(step, run / "removed" / step) for step in RULE_STEPS]
    for origin, folder in sources:
        for file in sorted(folder.glob("*.parquet")):
            out.extend((origin, doc) for doc in _documents(pq.read_table(file)))
    return out


def judge(recipe: Recipe, doc: Document) -> tuple[str | None, str | None]:
    """``(rule, reason)`` of the first rule that removes the document, or ``(None, None)``."""
    for rule in recipe.rules.ordered():
        verdict = rule.check(doc.metadata)
        if verdict is not True:
            return rule.name, verdict[1] if isinstance(verdict, tuple) else None
    return None, None


def refilter(run: Path, recipe: Recipe, out: Path | None = None) -> dict:
    """Judge again, write ``curated/`` and ``removed/<rule>/`` under ``out``, return the comparison."""
    run_info = json.loads((run / "run.json").read_text())
    previous = run_info["config"]["recipe"]
    warnings = [
        f"'{key}' differs from the run's; it is fixed at curate time and is not re-applied"
        for key in ("signals", "language")
        if json.loads(json.dumps(recipe.to_dict()[key])) != previous.get(key)
    ]
    out = out or run / "refilter" / recipe.name
    schema = curated_schema(recipe)
    judged = load_judged(run)
    before: Counter[str] = Counter(origin for origin, _ in judged)
    after: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    moved: Counter[tuple[str, str]] = Counter()
    pii = PIIFormatter(remove_emails=recipe.pii.emails, remove_ips=recipe.pii.ips)
    tokenizers: dict[str, WordTokenizer] = {}
    writers = {name: AtomicParquetWriter(str(out / "removed" / name), schema) for name in RULE_STEPS}
    writers["curated"] = AtomicParquetWriter(str(out / "curated"), schema)
    for writer in writers.values():
        writer.__enter__()
    try:
        for origin, doc in judged:
            rule, reason = judge(recipe, doc)
            target = rule or "curated"
            if target == "curated" and origin != "curated":
                language = doc.metadata.get("language") or "en"
                tok = tokenizers.setdefault(language, WordTokenizer(language))
                with tok.batch():
                    doc.text = c4_lines(tok.tokenize(doc.text), tok, recipe.signals).text
                if recipe.pii.emails or recipe.pii.ips:
                    doc.text = pii.format(doc.text)
            doc.metadata["filter_reason"] = reason
            writers[target].write(doc, 0)
            after[target] += 1
            if reason:
                reasons[f"{target}/{reason}"] += 1
            if origin != target:
                moved[(origin, target)] += 1
    except BaseException:
        for writer in writers.values():
            writer.close(commit=False)
        raise
    for writer in writers.values():
        writer.close(commit=True)
    return {
        "output": str(out),
        "documents": len(judged),
        "before": dict(before),
        "after": dict(after),
        "reasons": dict(reasons.most_common()),
        "moved": {f"{a} -> {b}": n for (a, b), n in moved.most_common()},
        "warnings": warnings,
    }


def print_report(result: dict) -> None:
    print(f"{result['documents']} documents judged again; output: {result['output']}")
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print(f"{'step':20} {'before':>8} {'after':>8}")
    for step in ("curated", *RULE_STEPS):
        print(f"{step:20} {result['before'].get(step, 0):>8} {result['after'].get(step, 0):>8}")
    if result["moved"]:
        print("moved: " + ", ".join(f"{k}: {v}" for k, v in result["moved"].items()))
    for reason, count in result["reasons"].items():
        print(f"  removed by {reason}: {count}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.refilter", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory made by pipelines.run (holds run.json)")
    parser.add_argument("--recipe", required=True, help="recipe YAML with the new thresholds")
    parser.add_argument("--out", default=None, help="output directory (default: RUN/refilter/<recipe name>)")
    args = parser.parse_args(argv)
    run = Path(args.run)
    try:
        if not (run / "run.json").is_file():
            raise RecipeError(f"{run} is not a run directory (no run.json)")
        recipe = load_recipe(args.recipe)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = refilter(run, recipe, Path(args.out) if args.out else None)
    print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
