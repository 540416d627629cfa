"""``python -m pipelines.refilter RUN --recipe NEW.yaml``: re-apply rule thresholds to a finished run.

Signals are stored beside the text, so a different threshold needs no extraction, no language ID and
no tokenization. Refilter is a pipeline: every document that reached the rules (``curated/``, then
``removed/<rule>/`` in FineWeb's order) is streamed through the same rule, C4-edit and PII steps the
curate stage runs (``curate.pipeline.judge_steps``), into ``RUN/refilter/<name>/``. Text that is already
C4's output (``curated/``, ``removed/fineweb/``) is not edited again, nor is ``curated/`` text
PII-formatted again; a document that newly passes gets both, as in the curate stage.

What a threshold change cannot express (C4's line-level options, stop words, the language model) is
part of ``signals``/``language`` and needs a new curate run; this command says so when they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from common.config import ConfigError
from common.documents import DocumentWriter
from curate.pipeline import PII_DONE_KEY, Removed, judge_steps
from filters import c4
from filters.quality import C4_TEXT_KEY
from pipelines.recipe import Recipe, load_recipe

ORIGIN_KEY = "_origin"  # where a document was before: "curated" or a rule id; not a column
KEPT = "curated"


class JudgedDocuments(PipelineStep):
    """Every document the rules saw in a run, streamed: ``curated/``, then each rule's ``removed/`` folder."""

    name = "judged documents"
    type = "📖 - READER"

    def __init__(self, run: Path, rule_ids: list[str], before: Counter):
        super().__init__()
        self.run_dir, self.rule_ids, self.before = run, rule_ids, before

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        c4_output = self.rule_ids[self.rule_ids.index(c4.FAMILY) + 1 :]  # removed after C4 edited them
        origins = [(KEPT, self.run_dir / KEPT)] + [(r, self.run_dir / "removed" / r) for r in self.rule_ids]
        for origin, folder in origins:
            for file in sorted(folder.glob("*.parquet")):
                for batch in pq.ParquetFile(file).iter_batches():
                    for row in batch.to_pylist():
                        text, doc_id = row.pop("text") or "", row.pop("id")
                        row.pop("filter_reason", None)  # judged again
                        row[ORIGIN_KEY] = origin
                        if origin == KEPT or origin in c4_output:
                            row[C4_TEXT_KEY] = text
                        row[PII_DONE_KEY] = origin == KEPT
                        self.before[origin] += 1
                        yield Document(text=text, id=doc_id, metadata=row)


class Tally:
    """Where each document went (``after``), why (``reasons``) and from where (``moved``)."""

    def __init__(self) -> None:
        self.before: Counter[str] = Counter()
        self.after: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.moved: Counter[tuple[str, str]] = Counter()

    def count(self, doc: Document, target: str) -> None:
        self.after[target] += 1
        if reason := doc.metadata.get("filter_reason"):
            self.reasons[f"{target}/{reason}"] += 1
        if (origin := doc.metadata[ORIGIN_KEY]) != target:
            self.moved[(origin, target)] += 1


class CountingWriter(DocumentWriter):
    """The document writer, counting what it writes into a ``Tally``."""

    def __init__(self, folder: str, schema, target: str, tally: Tally):
        super().__init__(folder, schema)
        self.target, self.tally = target, tally

    def write(self, document: Document, rank: int = 0, **kwargs) -> None:
        self.tally.count(document, self.target)
        super().write(document, rank, **kwargs)


class CountedRemoved(Removed):
    """``removed/<rule id>/`` writers that count into a ``Tally``."""

    def __init__(self, folder: Path, tally: Tally):
        super().__init__(str(folder))
        self.tally = tally

    def writer(self, step_id: str) -> DocumentWriter:
        return CountingWriter(f"{self.folder}/{step_id}", self.schema, step_id, self.tally)


def refilter(run: Path, recipe: Recipe, out: Path | None = None) -> dict:
    """Judge again, write ``curated/`` and ``removed/<rule>/`` under ``out``, return the comparison."""
    previous = json.loads((run / "run.json").read_text())["config"]["recipe"]
    warnings = [
        f"'{key}' differs from the run's; it is fixed at curate time and is not re-applied"
        for key in ("signals", "language")
        if json.loads(json.dumps(recipe.to_dict()[key])) != previous.get(key)
    ]
    out = out or run / "refilter" / recipe.name
    tally = Tally()
    removed = CountedRemoved(out / "removed", tally)
    rule_ids = [rule.FAMILY for rule in recipe.curate.rules.ordered()]
    steps = [
        JudgedDocuments(run, rule_ids, tally.before),
        *judge_steps(recipe.curate, removed, classify=False),  # the classifier's drops are not read back
        CountingWriter(str(out / KEPT), removed.schema, KEPT, tally),
    ]
    data: DocumentsPipeline = None
    for step in steps:
        data = step(data, rank=0, world_size=1)
    for _ in data:
        pass
    return {
        "output": str(out),
        "documents": sum(tally.before.values()),
        "steps": [KEPT, *rule_ids],
        "before": dict(tally.before),
        "after": dict(tally.after),
        "reasons": dict(tally.reasons.most_common()),
        "moved": {f"{a} -> {b}": n for (a, b), n in tally.moved.most_common()},
        "warnings": warnings,
    }


def print_report(result: dict) -> None:
    print(f"{result['documents']} documents judged again; output: {result['output']}")
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print(f"{'step':20} {'before':>8} {'after':>8}")
    for step in result["steps"]:
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
            raise ConfigError(f"{run} is not a run directory (no run.json)")
        recipe = load_recipe(args.recipe)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_report(refilter(run, recipe, Path(args.out) if args.out else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
