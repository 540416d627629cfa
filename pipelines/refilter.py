"""``python -m pipelines.refilter RUN --recipe NEW.yaml``: re-apply rule thresholds to a finished run.

Every document that reached the rules (``curated/`` plus ``removed/<rule>/`` and
``removed/decontamination/``) is judged again by the new recipe's rules, in FineWeb's order, and
decontaminated against its eval sets when it names any, with the curate stage's own steps
(``curate.refilter.build_refilter_pipeline``, streaming); the output goes to ``RUN/refilter/<name>/``
and the counts before and after are printed. The output is a run directory of its own: ``stats.json``
(one stage, ``refilter``) and ``refilter.json`` (what was judged again, by which recipe, the comparison)
beside ``curated/`` and ``removed/<rule>/``, so ``pipelines.inspect`` and ``pipelines.report`` read it,
and every document says where it was before (``inspect --newly dropped|kept``). What a threshold change
cannot express (C4's line-level options, stop words, the language model) is part of
``signals``/``language`` and needs a new curate run; this command says so when they differ.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from pathlib import Path

from datatrove.pipeline.base import PipelineStep
from datatrove.utils.stats import PipelineStats

from common.atomic import atomic_write_text
from common.bounded_input import MAX_DATA_BYTES, read_json_bounded
from common.cli import ArgumentParser, one_line
from common.config import ConfigError
from common.lock import FolderLock, FolderUnavailable, check_apart, check_writable
from curate.refilter import KEPT, Tally, build_refilter_pipeline, judged_ids
from pipelines.layout import RunLayout
from pipelines.recipe import Recipe, load_recipe
from pipelines.stats import summarize_step

STAGE = "refilter"  # the one stage of a refilter output's stats.json


def run_steps(steps: list[PipelineStep]) -> None:
    """One task, in this process: a refilter reruns from scratch, it has no completions to resume."""
    data = None
    for step in steps:
        data = step(data, rank=0, world_size=1)
    deque(data, maxlen=0)  # drain the generator: the writers write as documents pass


def refilter(run: Path, recipe: Recipe, out: Path | None = None, argv: list[str] | None = None) -> dict:
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
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    steps = build_refilter_pipeline(recipe.curate, layout.curated, layout.removed_root, out, tally)
    run_steps(steps)
    result = comparison(out, recipe, tally, layout, warnings)
    command = ["python", "-m", "pipelines.refilter", *(argv if argv is not None else [str(run)])]
    write_records(run, out, recipe, steps, result, {"command": command, "started_at": started})
    return result


def comparison(out: Path, recipe: Recipe, tally: Tally, layout: RunLayout, warnings: list[str]) -> dict:
    """Documents per step before and after, why, and which moved where."""
    return {
        "output": str(out),
        "documents": sum(tally.before.values()),
        "steps": [KEPT, *judged_ids(recipe.curate, layout.removed_root)],
        "before": dict(tally.before),
        "after": dict(tally.after),
        "reasons": dict(tally.reasons.most_common()),
        "moved": {f"{a} -> {b}": n for (a, b), n in tally.moved.most_common()},
        "newly_dropped": sum(n for (a, _), n in tally.moved.items() if a == KEPT),
        "newly_kept": sum(n for (_, b), n in tally.moved.items() if b == KEPT),
        "changes": [
            {"from": a, "to": b, "reason": why, "documents": n} for (a, b, why), n in tally.changes.most_common()
        ],
        "warnings": warnings,
    }


def write_records(run: Path, out: Path, recipe: Recipe, steps: list[PipelineStep], result: dict, how: dict) -> None:
    """``out/stats.json`` from the steps' own counters (the curate stage's format) and ``out/refilter.json``."""
    summarized = [summarize_step(s.to_dict()) for s in PipelineStats(steps).stats]
    judged = [s for s in summarized if s["in"] is not None and s["kept"] is not None]
    stats = {"stages": {STAGE: {"tasks_completed": 1, "tasks_total": 1, "steps": judged}}}
    atomic_write_text(out / "stats.json", json.dumps(stats, indent=2))
    previous = json.loads(RunLayout(run).run_json.read_text())
    record = {
        "dump": previous.get("dump"),
        "source": f"refilter of {run} (its curated/ and removed/<rule>/ judged again)",
        "refilter_of": str(run),
        **how,
        "config": {"recipe": recipe.to_dict()},
        "comparison": result,
    }
    atomic_write_text(RunLayout(out).refilter_json, json.dumps(record, indent=2, default=str))


def print_report(result: dict) -> None:
    print(f"{result['documents']} documents judged again; output: {result['output']}")
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print(f"{'step':20} {'before':>8} {'after':>8}")
    for step in result["steps"]:
        print(f"{step:20} {result['before'].get(step, 0):>8} {result['after'].get(step, 0):>8}")
    if result["moved"]:
        print("moved: " + ", ".join(f"{k}: {v}" for k, v in result["moved"].items()))
    for direction, key, reason_of in (("dropped", "newly_dropped", "to"), ("kept", "newly_kept", "from")):
        rows = [c for c in result["changes"] if (c["from"] if direction == "dropped" else c["to"]) == KEPT]
        why = ", ".join(f"{c[reason_of]}/{c['reason']}: {c['documents']}" for c in rows)
        print(f"newly {direction}: {result[key]}" + (f" ({why})" if why else ""))
    print(f"browse them: python -m pipelines.inspect {result['output']} --newly dropped (or kept)")
    for reason, count in result["reasons"].items():
        print(f"  removed by {reason}: {count}")


def check_run_record(path: Path) -> None:
    """run.json holds a JSON object with the run's recipe (`config.recipe`), as pipelines.run writes it; a
    garbled or foreign one is a ConfigError before the output folder is made (it was a traceback after)."""
    try:
        record = read_json_bounded(path, MAX_DATA_BYTES)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a run record ({err})") from None
    config = record.get("config") if isinstance(record, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("recipe"), dict):
        raise ConfigError(f"{path}: not a run record (no `config.recipe` object)")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m pipelines.refilter", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory made by pipelines.run (holds run.json)")
    parser.add_argument("--recipe", required=True, help="recipe YAML with the new thresholds")
    parser.add_argument("--out", default=None, help="output directory (default: RUN/refilter/<recipe name>)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    run = Path(args.run)
    try:
        if not (run / "run.json").is_file():
            raise ConfigError(f"{run} is not a run directory (no run.json)")
        check_run_record(run / "run.json")
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
    print_report(refilter(run, recipe, out, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
