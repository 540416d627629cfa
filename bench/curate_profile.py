"""A recipe's cost per page, measured by real ``pipelines.run`` runs, then checked on WARCs it never saw.

Input: the ``html_extraction_*`` pages (1,061 real pages of many sites and languages) shuffled with a fixed
seed into six WARC files, as Common Crawl's WARCs are random slices of a crawl: three to fit, three held
out. Each run is ``python -m pipelines.run FILES --workers 1`` (one task per WARC, in one process; its CPU
seconds and peak memory from the kernel, ``os.wait4``). Four runs per recipe:

* one tiny WARC (one page), then the same page twice as two WARCs: the difference is what each task pays
  once (models, block lists), the rest what a run pays once (interpreter, imports, dedup stages);
* the three fit WARCs: (CPU - fixed) / pages is the cost per page, split between curation and dedup by
  their steps' timers; kept documents, tokens, bytes written per folder, objects written per task. A recipe
  that dedups with BFF: its decision stage (``dedup_bff``, its CPU from the run's ``cpu.json``) apart, its
  fixed part from the one-page run, the rest per n-gram of the run's estimate (the figure sizing its filter);
* the three held-out WARCs: the measured run beside ``pipelines.costs.plan``'s prediction from the fit,
  and from ``pipelines.plan --calibrate``'s figures of the fit run.

With BFF, its decision stage has too few documents in these runs (~150) to time: its cost per n-gram comes
from the step alone (``BffDedup``, in a fresh fork, CPU from the kernel) over ``bench.bff``'s input at
``BFF_SIZES`` documents: the line through the first two, checked on the third.

    python -m bench.curate_profile [--recipe pipelines/recipes/dclm.yaml ...] [--write] [--json out.json]

``--write`` stores each recipe's entry in ``pipelines/recipes/costs.json``, the planner's table.
"""

from __future__ import annotations

import html
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from statistics import median

from bench.curate import in_fresh_process
from common.cli import ArgumentParser
from curate.warc_fastwarc import count_responses
from dedup.bff_stage import SUMMARY, BffDedup, estimate_ngrams
from dedup.config import DedupConfig
from dedup.pipeline import count_input_files, document_reader
from pipelines.costs import (
    CPU_FILE,
    STORAGE_FOLDERS,
    Cluster,
    RecipeCosts,
    Workload,
    plan,
    process_cpu_seconds,
    stage_group,
    write_costs,
)
from pipelines.plan import calibrated, curated_documents
from pipelines.recipe import load_recipe
from tests.support import shared_data
from tests.support.warc_writer import Page, write_pages

RECIPES = Path(__file__).resolve().parents[1] / "pipelines" / "recipes"
SPLITS = 6  # WARC files; the first half fits, the second half is held out
BFF_SIZES = (2_000, 8_000, 20_000)  # documents of bench.bff's input: BFF's rate from the first two, checked on the last
ONE_CPU = Cluster(cpus=1, mem_per_cpu_gb=64, price_per_cpu_hour=0.0)


def write_warcs(folder: Path, seed: int = 0) -> dict[str, list[Path]]:
    """The extraction pages shuffled into SPLITS WARCs, and a one-page WARC (twice, as two files)."""
    pages = [
        Page(url=f"{row['page_url']}#{name}", body=row["html"])
        for name in shared_data.EXTRACTION_SETS
        for row in shared_data.ground_truth(name)
    ]
    random.Random(seed).shuffle(pages)
    files = []
    for i in range(SPLITS):
        files.append(folder / f"part-{i}.warc.gz")
        write_pages(pages[i::SPLITS], files[-1])
    tiny = [folder / "tiny-a" / "one.warc.gz", folder / "tiny-b" / "one.warc.gz"]
    for path in tiny:
        path.parent.mkdir()
        write_pages([one_kept_page()], path)
    half = SPLITS // 2
    return {"tiny1": tiny[:1], "tiny2": tiny, "fit": files[:half], "heldout": files[half:]}


def one_kept_page() -> Page:
    """A real web document of ``cc_web_text_samples`` (the one nearest 350 words: short, so the tiny runs measure
    fixed costs, long enough for every rule) as a page every recipe keeps (a run that keeps nothing would not run
    its dedup stages, whose fixed cost the tiny runs measure)."""
    rows = (shared_data.shared_data_dir() / "cc_web_text_samples" / "docs.jsonl").read_text().splitlines()
    doc = min((json.loads(line) for line in rows), key=lambda d: abs(len(d["text"].split()) - 350))
    paragraphs = "".join(f"<p>{html.escape(line)}</p>" for line in doc["text"].splitlines() if line.strip())
    return Page("https://tiny.example/article", f"<html><body><article>{paragraphs}</article></body></html>".encode())


def measured_run(files: list[Path], recipe: Path, out: Path) -> dict:
    """One ``pipelines.run`` in a child: its CPU seconds (with its sandbox children), peak RSS, report, stats."""
    cmd = [sys.executable, "-m", "pipelines.run", *map(str, files), "--out", str(out), "--workers", "1",
           "--recipe", str(recipe), "--dump", "bench"]
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    _, status, usage = os.wait4(child.pid, 0)
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {stderr[-2000:]}")
    run = out / "bench"
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.monotonic() - start,
        "peak_rss_mb": usage.ru_maxrss / 1024, "run": run,
        "report": json.loads((run / "report" / "report.json").read_text()),
        "stats": json.loads((run / "stats.json").read_text()),
        "stage_cpu": json.loads((run / CPU_FILE).read_text()),  # per stage, from the kernel (local executor)
        "responses": sum(count_responses(str(f)) for f in files),
        "warc_bytes": sum(f.stat().st_size for f in files),
    }


def fit_costs(name: str, tiny1: dict, tiny2: dict, fit: dict, tasks: int, bff: dict | None = None) -> RecipeCosts:
    """The per-task and per-run fixed costs from the tiny runs, the per-page figures from the fit run; with
    BFF (``bff_rate``) its per-n-gram cost from its own, larger runs."""
    task_fixed = max(0.0, tiny2["cpu_s"] - tiny1["cpu_s"])
    bff_fixed = tiny1["stage_cpu"].get("dedup_bff", 0.0)  # BFF's one task on one page
    run_fixed = max(0.0, tiny1["cpu_s"] - task_fixed - bff_fixed)
    pages = fit["responses"]
    bff_spent = max(0.0, fit["stage_cpu"].get("dedup_bff", 0.0) - bff_fixed)
    ngrams = estimate_ngrams(str(fit["run"] / "curated")) if "dedup_bff" in fit["stage_cpu"] else 0
    variable = max(0.0, fit["cpu_s"] - run_fixed - tasks * task_fixed - bff_fixed - bff_spent)
    per_page = variable / pages
    timers = {"curate": 0.0, "dedup": 0.0}
    for stage, entry in fit["stats"]["stages"].items():
        if stage_group(stage) != "bff":  # measured apart
            timers[stage_group(stage)] += sum(s["time_s"] for s in entry["steps"])
    timed = sum(timers.values()) or 1.0
    totals, clusters = fit["report"]["totals"], fit["report"].get("clusters") or {}
    minhash_in = next((s["in"] for s in fit["report"]["steps"] if s["step"] == "minhash"), None)
    run = fit["run"]
    written = [p for p in run.rglob("*") if p.is_file()]
    return RecipeCosts(
        recipe=name,
        run_fixed_cpu_s=round(run_fixed, 3),
        task_fixed_cpu_s=round(task_fixed, 3),
        cpu_s_per_response={k: per_page * v / timed for k, v in timers.items()},
        kept_per_response=totals["kept_documents"] / pages,
        tokens_per_kept_doc=totals["kept_tokens"] / max(1, totals["kept_documents"]),
        bytes_per_response={
            f: sum(p.stat().st_size for p in (run / f).rglob("*") if p.is_file()) / pages for f in STORAGE_FOLDERS
        },
        warc_bytes_per_response=fit["warc_bytes"] / pages,
        objects_per_task=len(written) / tasks,
        curated_per_response=curated_documents(fit["report"]) / pages,
        pairs_per_curated_doc=clusters.get("duplicates_removed", 0) / minhash_in if minhash_in else 0.0,
        peak_rss_mb=round(max(tiny1["peak_rss_mb"], fit["peak_rss_mb"]), 1),
        measured={
            "by": "python -m bench.curate_profile", "responses": pages, "warcs": tasks,
            "date": time.strftime("%Y-%m-%d"), "cpu": _cpu_name(),
        },
        bff_fixed_cpu_s=round(bff_fixed, 3),
        bff_cpu_s_per_ngram=bff["cpu_s_per_ngram"] if bff else 0.0,
        bff_ngrams_per_curated_doc=ngrams / max(1, curated_documents(fit["report"])),
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def bff_step_cpu(folder: Path, out: Path, config: DedupConfig) -> tuple[float, int]:
    """BFF's decision step alone over ``folder``'s parquet documents: its CPU seconds and the run's n-gram estimate."""
    config = replace(config, url_dedup=False, exact_dedup=False)
    step = BffDedup([document_reader(str(folder))], str(folder), str(out), config, count_input_files(str(folder)))
    start = process_cpu_seconds()
    step.run()
    return process_cpu_seconds() - start, estimate_ngrams(str(folder))


def bff_rate(scratch: Path, config: DedupConfig) -> dict:
    """BFF's CPU per n-gram of the estimate: the step over ``BFF_SIZES`` documents of ``bench.bff``'s input
    (real text, planted copies), each in a fresh fork; the line through the first two predicts the last."""
    from bench.bff import build_input

    points = []
    for docs in BFF_SIZES:
        folder = scratch / f"bff-{docs}"
        shutil.rmtree(folder, ignore_errors=True)
        build_input(folder / "in", docs, files=4)
        cpu, ngrams = in_fresh_process(partial(bff_step_cpu, folder / "in", folder / "out", config))
        points.append({"docs": docs, "ngrams": ngrams, "cpu_s": round(cpu, 3)})
        print(f"BFF step: {docs:,} documents, {ngrams:,} n-grams (estimate), CPU s {cpu:.2f}", flush=True)
    first, second, last = points
    rate = (second["cpu_s"] - first["cpu_s"]) / (second["ngrams"] - first["ngrams"])
    predicted = first["cpu_s"] + (last["ngrams"] - first["ngrams"]) * rate
    return {"cpu_s_per_ngram": rate, "points": points, "predicted_last_cpu_s": predicted,
            "error_last": predicted / last["cpu_s"] - 1}  # fmt: skip


def held_out_check(costs: RecipeCosts, fit: dict, heldout: dict, tasks: int, dedup: DedupConfig | None) -> dict:
    """Prediction for the held-out WARCs (from the table entry and from the fit run's own stats) vs the run;
    with BFF also its decision stage's CPU and its filter's bytes."""
    work = Workload("heldout", tasks, heldout["responses"], "counted")
    out = {"measured": {"cpu_s": heldout["cpu_s"], "kept": heldout["report"]["totals"]["kept_documents"],
                        "responses": heldout["responses"], "peak_rss_mb": heldout["peak_rss_mb"]}}
    bff_summary = heldout["run"] / "minhash" / "bff" / "clusters" / SUMMARY
    if bff_summary.is_file():
        out["measured"] |= {"bff_cpu_s": heldout["stage_cpu"]["dedup_bff"],
                            "bff_filter_bytes": json.loads(bff_summary.read_text())["filter_bytes"]}
    for how, entry in (("profile", costs), ("calibrate", calibrated(costs, fit["run"]))):
        predicted = plan(work, entry, ONE_CPU, dedup=dedup)
        out[how] = {
            "cpu_s": predicted.cpu_s, "kept": predicted.kept_documents,
            "cpu_error": predicted.cpu_s / heldout["cpu_s"] - 1,
            "kept_error": predicted.kept_documents / max(1, out["measured"]["kept"]) - 1,
        }
        bff = next((s for s in predicted.stages if s.name == "bff"), None)
        if bff is not None and "bff_cpu_s" in out["measured"]:
            filter_bytes = (bff.memory_mb_per_task - entry.peak_rss_mb) * 2**20
            out[how] |= {"bff_cpu_s": bff.cpu_s, "bff_cpu_error": bff.cpu_s / out["measured"]["bff_cpu_s"] - 1,
                         "bff_filter_error": filter_bytes / out["measured"]["bff_filter_bytes"] - 1}
    return out


def profile(recipe: Path, warcs: dict[str, list[Path]], scratch: Path, repeats: int) -> tuple[RecipeCosts, dict]:
    """The four runs of one recipe (the tiny ones ``repeats`` times, their median CPU), its entry, its check."""
    loaded = load_recipe(recipe)
    name = loaded.name
    runs = {}
    for key in ("tiny1", "tiny2", "fit", "heldout"):
        tries = []
        for attempt in range(repeats if key.startswith("tiny") else 1):
            out = scratch / f"{name}-{key}-{attempt}"
            shutil.rmtree(out, ignore_errors=True)
            tries.append(measured_run(warcs[key], recipe, out))
        stage_cpu = {k: median(t["stage_cpu"].get(k, 0.0) for t in tries) for k in tries[0]["stage_cpu"]}
        runs[key] = {**tries[0], "cpu_s": median(t["cpu_s"] for t in tries), "stage_cpu": stage_cpu}
        cpu = " ".join(f"{t['cpu_s']:.2f}" for t in tries)
        print(f"{name} {key}: {runs[key]['responses']} pages, CPU s {cpu}, "
              f"{runs[key]['report']['totals']['kept_documents']} kept, {runs[key]['peak_rss_mb']:.0f} MB", flush=True)
    tasks = len(warcs["fit"])
    dedup = loaded.dedup.config() if loaded.dedup.enabled else None
    bff = bff_rate(scratch, dedup) if dedup is not None and dedup.method == "bff" else None
    costs = fit_costs(name, runs["tiny1"], runs["tiny2"], runs["fit"], tasks, bff)
    if bff:
        costs.measured["bff"] = {"by": "BffDedup over bench.bff's input", **bff}
    return costs, held_out_check(costs, runs["fit"], runs["heldout"], len(warcs["heldout"]), dedup)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", nargs="+", type=Path, default=sorted(RECIPES.glob("*.yaml")))
    parser.add_argument("--repeats", type=int, default=2, help="runs of each tiny WARC set (median CPU)")
    parser.add_argument("--write", action="store_true", help="store the entries in pipelines/recipes/costs.json")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        warcs = write_warcs(Path(tmp))
        for recipe in args.recipe:
            costs, check = profile(recipe, warcs, Path(tmp) / "runs", args.repeats)
            summary[costs.recipe] = {"costs": costs.__dict__, "heldout": check}
            if args.write:
                write_costs(costs)
    print(f"\n{'recipe':16} {'pages':>6} {'CPU s':>8} {'predicted':>10} {'error':>7} {'calibrate':>10} {'error':>7}"
          f" {'kept':>6} {'predicted':>10} {'error':>7}")
    for name, entry in summary.items():
        h = entry["heldout"]
        m, p, c = h["measured"], h["profile"], h["calibrate"]
        print(f"{name:16} {m['responses']:>6} {m['cpu_s']:>8.2f} {p['cpu_s']:>10.2f} {p['cpu_error']:>+7.1%}"
              f" {c['cpu_s']:>10.2f} {c['cpu_error']:>+7.1%} {m['kept']:>6} {p['kept']:>10.1f}"
              f" {p['kept_error']:>+7.1%}")
    for name, entry in summary.items():
        m, p, c = entry["heldout"]["measured"], entry["heldout"]["profile"], entry["heldout"]["calibrate"]
        rate = entry["costs"]["measured"].get("bff")
        if rate:
            last = rate["points"][-1]
            print(f"{name} BFF step: {rate['cpu_s_per_ngram'] * 1e6:.3f} us per n-gram; {last['docs']:,} documents: "
                  f"CPU s {last['cpu_s']:.2f}, predicted {rate['predicted_last_cpu_s']:.2f} "
                  f"({rate['error_last']:+.1%})")
        if "bff_cpu_s" in p:
            print(f"{name} BFF decision stage: CPU s {m['bff_cpu_s']:.2f}, predicted {p['bff_cpu_s']:.2f} "
                  f"({p['bff_cpu_error']:+.1%}), calibrated {c['bff_cpu_s']:.2f} ({c['bff_cpu_error']:+.1%}); filter "
                  f"{m['bff_filter_bytes']:,} bytes, predicted {p['bff_filter_error']:+.1%}, "
                  f"calibrated {c['bff_filter_error']:+.1%}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
