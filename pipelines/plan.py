"""``python -m pipelines.plan SOURCE --recipe R``: what curating SOURCE will take, before the first task.

SOURCE is what ``pipelines.run`` takes: a crawl id (its published size, or its listing under ``--cc-base``
times ``--pages-per-warc``), WARC files / globs / listings (their response records counted, headers only),
or ``sample``. The recipe's measured cost per page (``pipelines/recipes/costs.json``, refreshed by
``python -m bench.curate_profile --write``) or, with ``--calibrate RUN``, a finished run's own stats, scaled
to the source on the cluster described by ``--cpus``, ``--mem-per-cpu`` and ``--price``. ``--explain``
prints the arithmetic; ``--json`` the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from common.bounded_input import MAX_DATA_BYTES, read_json_bounded
from common.cli import CPUS, GB_PER_CPU, MAX_TASK_MB, NODE_CPUS, ArgumentParser, fail, integer, real
from common.config import ConfigError
from pipelines.costs import (
    COSTS_TABLE,
    CPU_FILE,
    STORAGE_FOLDERS,
    Cluster,
    Plan,
    RecipeCosts,
    Workload,
    load_costs,
    plan,
    stage_group,
)
from pipelines.recipe import load_recipe
from pipelines.sources import DEFAULT_CC_BASE, SourceError, normalize_crawl_id, resolve_crawl, resolve_source

# Common Crawl's announcements (commoncrawl.org/blog): WARC files in warc.paths.gz and pages (response records)
PUBLISHED_CRAWLS = {
    "CC-MAIN-2024-10": (90_000, 3_160_000_000),
}
CC_PAGES_PER_WARC = 35_100  # CC-MAIN-2024-10: 3.16 billion pages in 90,000 WARC files


PRICE = real(0, 1000)  # USD per CPU-hour: a hundred times on-demand cloud prices


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m pipelines.plan", description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="+", help="crawl id, WARC files / globs / listings, or 'sample'")
    parser.add_argument("--recipe", default=None, help="recipe YAML (default: the bundled FineWeb recipe)")
    parser.add_argument("--cpus", type=CPUS, default=1000, help="CPUs rented (default: 1000)")
    parser.add_argument("--mem-per-cpu", type=GB_PER_CPU, default=4.0, metavar="GB", help="memory per CPU (default: 4)")
    parser.add_argument(
        "--node-cpus", type=NODE_CPUS, default=16, help="CPUs per node: a task's memory limit (default 16)"
    )
    parser.add_argument("--price", type=PRICE, default=0.05, metavar="USD", help="price per CPU-hour (default: 0.05)")
    parser.add_argument(
        "--cluster-memory",
        type=integer(1, MAX_TASK_MB),
        default=None,
        metavar="MB",
        help="memory cap of a dedup cluster task (default: the recipe's dedup.cluster_memory_mb)",
    )
    parser.add_argument(
        "--dedup-removes",
        type=real(0, 1, open_high=True),
        default=None,
        metavar="FRACTION",
        help="share of curated documents dedup removes across the source (default: the profile's, "
        "which sees only duplicates inside its few WARCs)",
    )
    parser.add_argument("--cc-base", default=None, help="read the crawl's listing here instead of its published size")
    parser.add_argument(
        "--pages-per-warc",
        type=real(0, 1e7, open_low=True),
        default=CC_PAGES_PER_WARC,
        help=f"pages per listed WARC that cannot be counted here (default: {CC_PAGES_PER_WARC:,})",
    )
    parser.add_argument("--costs", type=Path, default=COSTS_TABLE, help="cost table (default: the shipped one)")
    parser.add_argument(
        "--calibrate",
        type=Path,
        default=None,
        metavar="RUN",
        help="a finished run of this recipe: its own stats replace the table's per-page figures",
    )
    parser.add_argument("--explain", action="store_true", help="print the arithmetic")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def workload_of(sources: list[str], cc_base: str | None, pages_per_warc: float) -> Workload:
    """WARC files and their pages: counted for local files, published or listed for a crawl."""
    if not pages_per_warc > 0:
        raise ConfigError(f"--pages-per-warc must be > 0, got {pages_per_warc}")
    crawl = normalize_crawl_id(sources[0]) if len(sources) == 1 else None
    if crawl and cc_base is None:
        if crawl not in PUBLISHED_CRAWLS:
            known = ", ".join(PUBLISHED_CRAWLS)
            raise SourceError(
                f"unknown crawl {crawl}: its size is not published here ({known}); "
                f"give --cc-base URL to read its listing"
            )
        warcs, pages = PUBLISHED_CRAWLS[crawl]
        return Workload(crawl, warcs, pages, f"{pages:,} pages in {warcs:,} WARC files (published by Common Crawl)")
    if crawl:
        listed = resolve_crawl(crawl, cc_base or DEFAULT_CC_BASE)
        n = len(listed.paths)
        return Workload(crawl, n, n * pages_per_warc, f"{n:,} listed WARC files x {pages_per_warc:,.0f} pages")
    resolved = resolve_source(sources)
    files = [f"{resolved.base}/{p}" for p in resolved.paths]
    if any("://" in f for f in files):
        n = len(files)
        return Workload(resolved.dump, n, n * pages_per_warc, f"{n:,} WARC URLs x {pages_per_warc:,.0f} pages")
    from curate.warc_fastwarc import count_responses

    try:
        pages = sum(count_responses(f) for f in files)
    except OSError as err:  # a file that is not a WARC ("Invalid WARC header"), or unreadable
        raise SourceError(f"cannot count the pages of the source: {err}") from None
    return Workload(resolved.dump, len(files), pages, f"{pages:,} response records counted in {len(files)} file(s)")


def stage_groups(seconds: dict[str, float]) -> dict[str, float]:
    """Per-stage figures summed into the planner's groups: curate, every dedup stage, and BFF's decision task
    when the run had one."""
    groups = {"curate": 0.0, "dedup": 0.0}
    for stage, value in seconds.items():
        groups[stage_group(stage)] = groups.get(stage_group(stage), 0.0) + value
    return groups


def cpu_per_page(run: Path, stats: dict, costs: RecipeCosts, pages: int, tasks: int) -> dict[str, float]:
    """A run's CPU seconds per page and stage group. A local run recorded its processes' CPU (``cpu.json``):
    less the table's fixed costs, split by its stages' CPU. Another executor's tasks ran elsewhere: the
    steps' own timers (wall time inside each step, so a busy machine inflates them), less the per-task loads.
    BFF's decision task (group ``bff``) is its own figure, fixed part included."""
    timers = stage_groups({k: sum(s["time_s"] for s in v["steps"]) for k, v in stats["stages"].items()})
    spent = json.loads((run / CPU_FILE).read_text()) if (run / CPU_FILE).is_file() else {}
    if "process" in spent and set(stats["stages"]) <= set(spent):
        split = stage_groups({k: spent[k] for k in stats["stages"]})
        variable = spent["process"] - costs.run_fixed_cpu_s - tasks * costs.task_fixed_cpu_s
    else:
        split = timers
        variable = sum(timers.values()) - tasks * costs.task_fixed_cpu_s
    bff = split.pop("bff", None)  # BFF's one task as measured, its fixed part in it (the planner adds it apart)
    variable -= bff or 0.0
    whole = sum(split.values()) or 1.0
    per_page = {k: max(0.0, variable) * v / whole / pages for k, v in split.items()}
    return per_page if bff is None else per_page | {"bff": bff / pages}


def curated_documents(report: dict) -> int:
    """Documents the curate stage wrote (the input of the first dedup step, else the kept ones)."""
    curate = [s for s in report["steps"] if s["stage"] == "curate"]
    return curate[-1]["kept"] if curate else report["totals"]["kept_documents"]


def calibrated(costs: RecipeCosts, run: Path) -> RecipeCosts:
    """The table's entry with the per-page figures of a finished run: its pages, CPU (``cpu_per_page``), kept
    documents and tokens, its folders' bytes. The fixed costs stay the table's. A run folder whose records
    are garbled (a cpu.json that is not JSON, stages as a list, a count as a string) is one ConfigError: each
    was a traceback from the arithmetic that read it."""
    try:
        return _calibrated(costs, run)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OSError, ZeroDivisionError) as err:
        raise ConfigError(f"--calibrate {run}: its records are not a finished run's ({type(err).__name__}: "
                          f"{str(err)[:300]})") from None  # fmt: skip


def _calibrated(costs: RecipeCosts, run: Path) -> RecipeCosts:
    try:
        info = read_json_bounded(run / "run.json", MAX_DATA_BYTES)
        report = read_json_bounded(run / "report" / "report.json", MAX_DATA_BYTES)
        stats = read_json_bounded(run / "stats.json", MAX_DATA_BYTES)
    except (OSError, ValueError) as err:
        raise ConfigError(f"--calibrate {run}: not a finished run ({err})") from None
    if info["config"]["recipe"]["name"] != costs.recipe:
        name = info["config"]["recipe"]["name"]
        raise ConfigError(f"--calibrate {run}: a run of recipe {name!r}, not {costs.recipe!r}")
    source = info["config"]["source"]
    files = [Path(source["base"]) / p for p in source["paths"]]
    if all(f.is_file() for f in files):
        from curate.warc_fastwarc import count_responses

        pages = sum(count_responses(str(f)) for f in files)
    else:  # inputs no longer here: the HTML documents the reader passed on
        pages = report["totals"]["html_documents"]
    if not pages or not report["totals"]["kept_documents"]:
        raise ConfigError(f"--calibrate {run}: the run read no pages or kept no documents")
    per_page = cpu_per_page(run, stats, costs, pages, len(files))
    bff = {}
    if "bff" in per_page:  # its decision task per n-gram of this run's estimate, less the table's fixed part
        from dedup.bff_stage import estimate_ngrams

        ngrams, curated = estimate_ngrams(str(run / "curated")), curated_documents(report)
        spent = per_page.pop("bff") * pages
        bff = {"bff_cpu_s_per_ngram": max(0.0, spent - costs.bff_fixed_cpu_s) / ngrams,
               "bff_ngrams_per_curated_doc": ngrams / max(1, curated)}  # fmt: skip
    totals = report["totals"]
    folder_bytes = {f: sum(p.stat().st_size for p in (run / f).rglob("*") if p.is_file()) for f in STORAGE_FOLDERS}
    return replace(
        costs,
        cpu_s_per_response=per_page,
        kept_per_response=totals["kept_documents"] / pages,
        curated_per_response=curated_documents(report) / pages,
        tokens_per_kept_doc=totals["kept_tokens"] / totals["kept_documents"],
        bytes_per_response={k: v / pages for k, v in folder_bytes.items()},
        measured={"calibrated_from": str(run), "responses": pages, "warcs": len(files)},
        **bff,
    )


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.1f} min"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def render(result: Plan, explain: bool) -> str:
    c, w = result.costs, result.workload
    how = ", ".join(
        f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in c.measured.items() if not isinstance(v, dict)
    )  # a nested record (BFF's rate measurement) is in --json
    lines = [
        f"plan: {w.name}, recipe {c.recipe} (costs: {how})",
        f"input: {w.warcs:,} WARC files, {w.responses:,.0f} pages",
        f"cluster: {result.cluster.cpus:,} CPUs x {result.cluster.mem_per_cpu_gb:g} GB, "
        f"${result.cluster.price_per_cpu_hour:g} per CPU-hour",
        f"{'stage':8} {'tasks':>10} {'CPU-hours':>12} {'wall':>10} {'memory/task':>12}",
    ]
    for s in result.stages:
        lines.append(
            f"{s.name:8} {s.tasks:>10,} {s.cpu_s / 3600:>12,.1f} {hours(s.wall_s):>10} "
            f"{s.memory_mb_per_task / 1024:>9.2f} GB"
        )
    lines += [
        f"total: {result.cpu_s / 3600:,.1f} CPU-hours, wall {hours(result.wall_s)}, cost ${result.cost:,.2f}",
        f"kept: {result.kept_documents:,.0f} documents, {result.kept_tokens:,.0f} tokens (whitespace words)",
        "storage: " + ", ".join(f"{k} {size(v)}" for k, v in result.storage_bytes.items()),
        f"store requests: {result.requests['get']:,.0f} GET, {result.requests['put']:,.0f} PUT",
    ]
    if explain:
        lines += ["", "arithmetic:", *(f"  {a}" for a in result.arithmetic)]
        lines += [f"  {a}" for s in result.stages for a in s.arithmetic]
        lines.append(f"  cost = {result.cpu_s / 3600:,.1f} CPU-hours x ${result.cluster.price_per_cpu_hour:g}")
    return "\n".join(lines)


def as_json(result: Plan) -> dict:
    return {
        "workload": asdict(result.workload),
        "cluster": asdict(result.cluster),
        "costs": asdict(result.costs),
        "stages": [asdict(s) for s in result.stages],
        "cpu_s": result.cpu_s,
        "cpu_hours": result.cpu_s / 3600,
        "wall_s": result.wall_s,
        "cost": result.cost,
        "kept_documents": result.kept_documents,
        "kept_tokens": result.kept_tokens,
        "storage_bytes": result.storage_bytes,
        "requests": result.requests,
    }


def make_plan(args: argparse.Namespace) -> Plan:
    """Validate everything, then compute (nothing is written)."""
    recipe = load_recipe(args.recipe)
    costs = load_costs(recipe.name, args.costs)
    cluster = Cluster(args.cpus, args.mem_per_cpu, args.price, args.node_cpus)
    cluster.check()
    if args.calibrate is not None:
        costs = calibrated(costs, args.calibrate)
    workload = workload_of(args.source, args.cc_base, args.pages_per_warc)
    cap = args.cluster_memory if args.cluster_memory is not None else recipe.dedup.config().cluster_memory_mb
    dedup = recipe.dedup.config() if recipe.dedup.enabled else None
    return plan(workload, costs, cluster, cap, args.dedup_removes, dedup)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = make_plan(args)
    except (ConfigError, SourceError) as err:
        fail(err)
    print(json.dumps(as_json(result), indent=2) if args.json else render(result, args.explain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
