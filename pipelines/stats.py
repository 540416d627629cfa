"""Merge the per-task stats of every stage into one readable ``stats.json``.

datatrove's executor writes a merged file only for the tasks it ran in *this* invocation, so after a
resume it would undercount; here every ``stats/<stage>/NNNNN.json`` on disk is summed instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datatrove.utils.stats import PipelineStats

from common.atomic import atomic_write_text
from common.storage import files_by_folder, read_files

METRICS = ("doc_len", "doc_len_tokens", "documents")  # distributions, not counts
COUNTED = ("total", "forwarded", "dropped")  # the step's own columns in the summary


def _total(value: Any) -> float:
    return value.get("total", 0) if isinstance(value, dict) else value or 0


def merge_stage(texts: list[bytes]) -> PipelineStats | None:
    """Sum the task stats files of one stage (None when the stage has none yet)."""
    stats = [PipelineStats.from_json(json.loads(text)) for text in texts]
    return sum(stats[1:], stats[0]) if stats else None


def step_id(name: str) -> str:
    """The id of a step from its stats name: datatrove records ``"<type>: <name>"``, and a step's name
    is its id (``"🔻 - FILTER: gopher_quality"`` -> ``gopher_quality``, its ``removed/`` folder)."""
    return name.split(": ", 1)[-1]


def kept(counters: dict) -> float | None:
    """Documents a step passed on. datatrove counts ``forwarded`` only once one is, so a filter that dropped
    every document it saw has ``total`` and ``dropped`` alone: it kept ``total - dropped`` (0), not nothing."""
    if "forwarded" in counters:
        return counters["forwarded"]
    if "total" in counters and "dropped" in counters:
        return counters["total"] - counters["dropped"]
    return None


def summarize_step(step: dict) -> dict:
    """``{id, name, in, kept, dropped, dropped_by_reason, counters, time_s}`` from a datatrove step dict."""
    counters = {k: _total(v) for k, v in step["stats"].items() if k not in METRICS}
    reasons = {k[len("dropped_") :]: v for k, v in counters.items() if k.startswith("dropped_")}
    others = {k: v for k, v in counters.items() if k not in COUNTED and not k.startswith("dropped_")}
    time_stats = step["time_stats"]
    return {
        "id": step_id(step["name"]),
        "name": step["name"],
        "in": counters.get("total"),
        "kept": kept(counters),
        "dropped": counters.get("dropped"),
        "dropped_by_reason": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "counters": others,
        "time_s": round(time_stats.get("total", 0.0), 3) if isinstance(time_stats, dict) else 0.0,
    }


def merge_run_stats(
    root: Path, stages: list[str], tasks: dict[str, int] | None = None, known: Mapping[str, str] | None = None
) -> dict:
    """Write ``root/stats.json`` (all stages, all tasks on disk) and return it. ``known``: the text of stats files
    this process has (``<stage>/NNNNN.json``: its own tasks wrote them, ``pipelines.executors.TaskStats``), read
    only when the listing shows another (a task of an earlier invocation)."""
    out: dict[str, Any] = {"stages": {}}
    # every stage's stats files and completions by two listings, the stats read together (on a store: a
    # listing of each and a read of the stats per stage, one after another, were 3 round trips a stage)
    stats_files, completions = files_by_folder(root / "stats", "*.json"), files_by_folder(root / "completions")
    known = known or {}
    names = [name for stage in stages for name in stats_files.get(stage, []) if name not in known]
    texts = {**known, **dict(zip(names, read_files(root / "stats", names), strict=True))}
    for stage in stages:
        merged = merge_stage([texts[name] for name in stats_files.get(stage, [])])
        entry: dict[str, Any] = {"tasks_completed": len(completions.get(stage, []))}
        if tasks and stage in tasks:
            entry["tasks_total"] = tasks[stage]
        entry["steps"] = [summarize_step(s.to_dict()) for s in merged.stats] if merged else []
        out["stages"][stage] = entry
    atomic_write_text(root / "stats.json", json.dumps(out, indent=2))
    return out
