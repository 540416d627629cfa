"""``python -m pipelines.refilter RUN --recipe NEW.yaml``: re-apply rule thresholds to a finished run.

Every document that reached the rules (``curated/`` plus ``removed/<rule>/`` and
``removed/decontamination/``) is judged again by the new recipe's rules, in FineWeb's order, and
decontaminated against its eval sets when it names any, with the curate stage's own steps
(``curate.refilter.build_refilter_pipeline``, streaming); the output goes to ``RUN/refilter/<name>/``
and the counts before and after are printed. What a threshold change cannot express (C4's line-level
options, stop words, the language model) is part of ``signals``/``language`` and needs a new curate
run; this command says so when they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path

from datatrove.pipeline.base import PipelineStep

from common.cli import one_line
from common.config import ConfigError
from common.lock import FolderLock, FolderUnavailable, check_apart, check_writable
from curate.refilter import KEPT, Tally, build_refilter_pipeline, judged_ids
from pipelines.layout import RunLayout
from pipelines.recipe import Recipe, load_recipe


def run_steps(steps: list[PipelineStep]) -> None:
    """One task, in this process: a refilter reruns from scratch, it has no completions to resume."""
    data = None
    for step in steps:
        data = step(data, rank=0, world_size=1)
    deque(data, maxlen=0)  # drain the generator: the writers write as documents pass


def refilter(run: Path, recipe: Recipe, out: Path | None = None) -> dict:
    """Judge again, write ``curated/`` and ``removed/<rule>/`` under ``out``, return the comparison."""
    layout = RunLayout(run)
    previous = json.loads(layout.run_json.read_text())["config"]["recipe"]
    warnings = [
        f"'{key}' differs from the run's; it is fixed at curate time and is not re-applied"
        for key in ("signals", "language")
        if json.loads(json.dumps(recipe.to_dict()[key])) != previous.get(key)
    ]
    out = out or run / "refilter" / recipe.name
    tally = Tally()
    run_steps(build_refilter_pipeline(recipe.curate, layout.curated, layout.removed_root, out, tally))
    return {
        "output": str(out),
        "documents": sum(tally.before.values()),
        "steps": [KEPT, *judged_ids(recipe.curate, layout.removed_root)],
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
        out = check_writable(args.out or run / "refilter" / recipe.name)
        layout = RunLayout(run)
        check_apart(out, {"run's curated documents": layout.curated, "run's removed documents": layout.removed_root})
        # the run must not be writing (curating, deduplicating) while its documents are judged, and one
        # refilter at a time per output: both locks are held until the process ends
        _run_lock = FolderLock(run, "pipelines.run or refilter", writes_below=False).acquire()
        _out_lock = FolderLock(out, "refilter").acquire()
    except (ConfigError, FolderUnavailable) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print_report(refilter(run, recipe, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
