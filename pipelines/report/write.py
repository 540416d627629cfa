"""``python -m pipelines.report RUN``: the run report, ``RUN/report/index.html`` with PNG plots.

People curating a crawl would rather look than read JSON. Every count in the report is the one in
``stats.json``; the parquet files add what stats cannot say (tokens, lengths, languages, domains,
scores, sampled documents). All numbers go to ``report/report.json`` first and the plots and the
page are drawn from that one dict, so what is shown is what was counted. The page is static: no
script, no external asset, images by relative path; it opens offline.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tqdm import tqdm

from common.atomic import atomic_write_text
from common.cli import ArgumentParser
from common.storage import as_path, is_remote
from common.transfer import fetch_ahead
from common.uploads import background_uploads
from pipelines.report.data import NEWLY, RunInfo, RunUnreadable, load_run, newly, reader_counters, resolve_run_dir
from pipelines.report.html import render
from pipelines.report.plots import draw_all
from pipelines.report.scan import LENGTH_EDGES, TOKEN_NOTE, Profile, count_rows, first_rows, scan

SAMPLES_PER_REASON = 2
SAMPLES_KEPT = 4
SAMPLES_PER_SET = 6
TOP_DOMAINS = 15
QUALITY_BINS = 40


def _extraction_index(run: RunInfo) -> int:
    """The step after which documents hold extracted text (tokens are undefined before it)."""
    return next((i for i, step in enumerate(run.steps) if step.name == "extraction"), -1)


def _passed(run: RunInfo, profiles: dict[str, Profile], index: int) -> list[Profile]:
    """The documents that passed step ``index``: the kept ones and those a later step removed."""
    return [profiles["kept"]] + [profiles[s.key] for s in run.removed if s.step is not None and s.step > index]


def _steps(run: RunInfo, profiles: dict[str, Profile]) -> list[dict]:
    first_text = _extraction_index(run)
    rows = []
    for i, step in enumerate(run.steps):
        removed_rows = sum(profiles[d].docs for d in step.removed_dirs)
        tokens = sum(p.tokens for p in _passed(run, profiles, i))
        rows.append(
            {
                "stage": step.stage,
                "step": step.name,
                "in": step.n_in,
                "kept": step.kept,
                "dropped": step.dropped,
                "reasons": step.reasons,
                "removed_dirs": step.removed_dirs,
                "removed_paths": [f"removed/{d}/" for d in step.removed_dirs],
                "removed_rows": removed_rows,
                "consistent": removed_rows == step.dropped,
                "tokens_kept": tokens if i >= first_text else None,
            }
        )
    return rows


def _funnel(steps: list[dict]) -> list[dict]:
    if not steps:
        return []
    refiltered = steps[0]["stage"] == "refilter"
    first = "judged again (curated + removed by the rules)" if refiltered else "read (HTML responses)"
    head = {"label": first, "docs": steps[0]["in"], "tokens": None}
    return [head] + [{"label": s["step"], "docs": s["kept"], "tokens": s["tokens_kept"]} for s in steps]


def _removals(run: RunInfo, profiles: dict[str, Profile]) -> list[dict]:
    """Drops by (step, reason) as ``stats.json`` counts them; drops stats gives no reason for are named
    from the files' ``filter_reason`` (the dedup filter records reasons only there)."""
    rows = []
    for step in run.steps:
        rows += [{"step": step.name, "reason": r, "count": n} for r, n in step.reasons.items()]
        if not step.unexplained:
            continue
        on_disk = sum((profiles[d].reasons for d in step.removed_dirs), Counter())
        extra = {r: n for r, n in on_disk.most_common() if r not in step.reasons}
        if sum(extra.values()) == step.unexplained:
            rows += [{"step": step.name, "reason": r, "count": n} for r, n in extra.items()]
        else:
            label = next(iter(extra), "(no reason recorded)")
            rows.append({"step": step.name, "reason": label, "count": step.unexplained})
    return rows


def _quality(kept: Profile, removed: list[Profile]) -> dict | None:
    scores = {"kept": kept.quality_scores, "removed": np.concatenate([p.quality_scores for p in removed] or [[]])}
    both = np.concatenate(list(scores.values()))
    if not len(both):
        return None
    lo, hi = float(both.min()), float(both.max())
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, QUALITY_BINS + 1)
    return {"edges": edges.tolist(), **{key: np.histogram(v, edges)[0].tolist() for key, v in scores.items()}}


def _clusters(kept: Profile) -> dict | None:
    if not kept.cluster_sizes:
        return None
    sizes = {str(k): v for k, v in sorted(kept.cluster_sizes.items())}
    return {"sizes": sizes, "duplicates_removed": sum((k - 1) * v for k, v in kept.cluster_sizes.items())}


def _samples(run: RunInfo, profiles: dict[str, Profile]) -> list[dict]:
    out = []
    for docset in [run.kept, *run.removed]:
        profile = profiles[docset.key]
        by_reason = sorted(profile.samples.items(), key=lambda kv: -profile.reasons.get(kv[0], 0))
        picked: list[dict] = []
        for rank in range(max((len(r.items) for _, r in by_reason), default=0)):  # round-robin over reasons
            picked += [r.items[rank] for _, r in by_reason if rank < len(r.items)]
        out.append({"set": docset.key, "label": docset.label, "docs": profile.docs, "items": picked[:SAMPLES_PER_SET]})
    return out


def build_report_data(run: RunInfo, seed: int = 0) -> dict:
    """Every number and sample the report shows, JSON-serializable."""
    sets = [run.kept, *run.removed]
    files = [f for s in sets for f in s.files]
    with fetch_ahead(files) as ahead:  # on a store: each file by one GET, while the one before is read
        with tqdm(desc="report: reading documents", unit="doc", disable=None) as bar:  # quiet off a TTY
            if not bar.disable:  # the footers only for a bar that shows its total (on a store 2 requests a file)
                bar.total = count_rows(files)
                bar.refresh()
            profiles = {
                s.key: scan(s, SAMPLES_KEPT if s.key == "kept" else SAMPLES_PER_REASON, seed, bar, ahead) for s in sets
            }
    kept = profiles["kept"]
    removed = [profiles[s.key] for s in run.removed]
    before = _passed(run, profiles, _extraction_index(run))
    steps, reader, stages = _steps(run, profiles), reader_counters(run.stats), run.stats["stages"]
    return {
        "dump": str(run.meta.get("dump") or run.root.name),
        "root": str(run.root),
        "meta": {k: run.meta.get(k) for k in ("source", "command", "started_at", "versions")},
        "recipe": (run.meta.get("config") or {}).get("recipe", {}).get("name"),
        "token_note": TOKEN_NOTE,
        "stages": {k: {x: v.get(x) for x in ("tasks_completed", "tasks_total")} for k, v in stages.items()},
        "reader": reader,
        "steps": steps,
        "funnel": _funnel(steps),
        "totals": {
            "records": reader.get("records"),
            "html_documents": steps[0]["in"] if steps else None,
            "kept_documents": kept.docs,
            "kept_tokens": kept.tokens,
            "kept_from": run.kept.label,
        },
        "removals": _removals(run, profiles),
        "languages": {"kept": dict(kept.languages), "removed": dict(sum((p.languages for p in removed), Counter()))},
        "lengths": {
            "edges": LENGTH_EDGES.tolist(),
            "before": np.sum([p.lengths for p in before], axis=0).tolist(),
            "after": kept.lengths.tolist(),
        },
        "quality": _quality(kept, removed),
        "clusters": _clusters(kept),
        "domains": {
            "kept": kept.domains.most_common(TOP_DOMAINS),
            "removed": sum((p.domains for p in removed), Counter()).most_common(TOP_DOMAINS),
        },
        "samples": _samples(run, profiles),
        "evaluation": _evaluation(run.root),
        "fine_tuning": fine_tuning_section(run.root),
        "refilter": _refilter(run),
    }


def _refilter(run: RunInfo) -> dict | None:
    """A refilter output against its run: the documents newly dropped (the run kept them) and newly kept (the run
    removed them), by reason (``refilter.json``), and the first few of each."""
    comparison = run.meta.get("comparison")
    if not run.meta.get("refilter_of") or comparison is None:
        return None
    return {
        "of": run.meta["refilter_of"],
        "newly_dropped": comparison["newly_dropped"],
        "newly_kept": comparison["newly_kept"],
        "changes": comparison["changes"],
        "samples": {which: first_rows(*newly(run, which), SAMPLES_PER_SET) for which in NEWLY},
    }


def _evaluation(root: Path) -> dict | None:  # the chain's final evaluation (evals.final), if it ran
    path = root / "train" / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def fine_tuning_section(root: Path) -> dict | None:
    """The chain's supervised fine-tuning (`--sft`, trainer.sft), if it ran: the held-out response loss of the
    base model (step 0) and of the fine-tuned one (its last evaluation), and where the checkpoint is."""
    metrics = root / "sft" / "metrics.jsonl"
    if not metrics.is_file():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    val = [(r["step"], r["val_response_loss"]) for r in rows if "val_response_loss" in r]
    steps = max((r["step"] for r in rows if "loss" in r), default=0)
    summary = f"fine-tuned for {steps} steps (sft/hf)"
    if len(val) >= 2:
        summary = (
            f"held-out response loss {val[0][1]:.3f} (base model) -> {val[-1][1]:.3f} after {steps} steps of "
            "supervised fine-tuning (checkpoint: sft/hf)"
        )
    return {"summary": summary, "val_response_loss": val, "steps": steps}


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report/`` (index.html, report.json, PNGs); return the index.html path."""
    return written_report(run_dir)[0]


def written_report(run_dir: Path, written: Mapping[str, dict] | None = None) -> tuple[Path, dict]:
    """``write_report``: the index.html path, and the report.json written as its reader gets it (the text parsed
    again), for the summary's table without reading the file back (on a store a HEAD and a GET). ``written``:
    ``stats.json`` / ``run.json`` as the caller just wrote them (``load_run``)."""
    run = load_run(as_path(run_dir), written)
    if not isinstance(run.stats.get("stages"), dict):  # a stats.json pipelines.run did not write
        raise RunUnreadable(f"{run.root / 'stats.json'}: not a finished run's stats (no `stages` object)")
    return _write(build_report_data(run), run.root / "report")


def add_evaluation(run_dir: Path) -> Path:
    """Put the chain's final evaluation (and fine-tuning) into the written report, not reading documents again."""
    folder = as_path(run_dir) / "report"
    data = json.loads((folder / "report.json").read_text())
    root = as_path(run_dir)
    return _write({**data, "evaluation": _evaluation(root), "fine_tuning": fine_tuning_section(root)}, folder)[0]


def _write(data: dict, folder: Path) -> tuple[Path, dict]:
    with background_uploads():  # on a store each PNG uploads while the next is drawn; the page after them
        images = draw_all(data, folder)
    report_json = json.dumps(data, indent=1, default=str)
    for name, text in (("report.json", report_json), ("index.html", render(data, images))):
        atomic_write_text(folder / name, text)
        if not is_remote(folder):
            (folder / name).chmod(0o644)  # a report is meant to be shared, whatever the umask
    return folder / "index.html", json.loads(report_json)


def summary_table(data: dict) -> str:
    """The short table printed at the end of a run: documents and tokens through the steps."""
    lines = [f"{'step':28} {'in':>9} {'kept':>9} {'dropped':>8} {'tokens kept':>12}  top reasons"]
    for s in data["steps"]:
        reasons = ", ".join(f"{k}={v}" for k, v in list(s["reasons"].items())[:3])
        tokens = f"{s['tokens_kept']:,}" if s["tokens_kept"] is not None else "-"
        lines.append(f"{s['step'][:28]:28} {s['in']:>9,} {s['kept']:>9,} {s['dropped']:>8,} {tokens:>12}  {reasons}")
    t = data["totals"]
    lines.append(f"kept: {t['kept_documents']:,} documents, {t['kept_tokens']:,} tokens ({data['token_note']})")
    if refiltered := data.get("refilter"):
        lines.append(
            f"against {refiltered['of']}: {refiltered['newly_dropped']:,} documents newly dropped, "
            f"{refiltered['newly_kept']:,} newly kept (pipelines.inspect RUN --newly dropped|kept)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m pipelines.report", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=as_path, help="run directory (OUT/<DUMP>), or an OUT folder holding one run")
    args = parser.parse_args(argv)
    try:
        index, report = written_report(resolve_run_dir(args.run))
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary_table(report))
    print(f"report: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
