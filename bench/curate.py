"""Curate-stage speed: ours against datatrove's FineWeb reference pipeline, same input, one run.

Input: the ``html_extraction_*`` pages wrapped into a WARC plus the real ``warc_samples`` files
(the parity corpus). Each repetition runs, one after another on one core each: datatrove's
examples/fineweb.py steps, our curate stage, and our curate stage without the language pre-check
(to show what the pre-check changes). Prints documents per second per core, medians over the
repetitions, the ratios, and the keep/drop agreement of each run with the reference.

Per core = documents / CPU seconds of the run (the process and its extraction sandbox child, see
``pipelines.compare.cpu_clock``): each pipeline is sequential, so on an idle machine that equals
wall time, and on a shared one other jobs do not inflate it. Wall-clock figures are printed too.

Each pipeline first processes a small warm-up WARC with the same step objects, untimed: the
one-time loading (URL blocklists ~5 s, spaCy, fastText) is paid once per task, and a production
task reads a 1 GB WARC, so the timed figure is the per-document throughput both sides reach.

    python -m bench.curate [--repeats 3] [--timeout 10] [--json out.json]
"""

from __future__ import annotations

# bench/ holds tokenize.py, which would shadow the stdlib module: run from the repo root instead.
import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from statistics import median

from pipelines.recipe import load_recipe
from tests.support import shared_data
from tests.support.parity import curate_decisions, disagreements, reference_decisions
from tests.support.warc_writer import Page, write_pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=10.0, help="per-page extraction limit, both sides")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = load_recipe().curate
    no_precheck = dataclasses.replace(
        config,
        extraction=dataclasses.replace(
            config.extraction, precheck=dataclasses.replace(config.extraction.precheck, enabled=False)
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        pages = Path(tmp) / "pages.warc.gz"
        shared_data.write_extraction_warc(pages)
        files = [pages, *shared_data.warc_sample_files()]
        warmup = [Path(tmp) / "warmup.warc.gz"]
        body = "<p>Warm-up page {i}: the committee met on Tuesday to discuss the plans for the library.</p>"
        write_pages([Page(f"https://warmup.example/{i}", f"<html><body>{body.format(i=i) * 8}</body></html>".encode())
                     for i in range(4)], warmup[0])
        runs: dict[str, list[float]] = {"datatrove": [], "ours": [], "ours, no pre-check": []}
        wall: dict[str, list[float]] = {name: [] for name in runs}
        agreement: dict[str, list[float]] = {"ours": [], "ours, no pre-check": []}
        jobs = {
            "datatrove": lambda: reference_decisions(files, args.timeout, warmup),
            "ours": lambda: curate_decisions(files, config, args.timeout, warmup),
            "ours, no pre-check": lambda: curate_decisions(files, no_precheck, args.timeout, warmup),
        }
        order = list(jobs)
        for rep in range(args.repeats):
            # rotate the order so that a slow period of a noisy machine does not always hit one pipeline
            results = {name: jobs[name]() for name in order[rep % 3 :] + order[: rep % 3]}
            ref = results["datatrove"]
            docs = len(ref.seen | results["ours"].seen)
            for name, result in results.items():
                runs[name].append(docs / result.cpu_seconds)
                wall[name].append(docs / result.seconds)
                if name != "datatrove":
                    agreement[name].append(1 - len(disagreements(result, ref)) / docs)
            print(
                f"repeat {rep + 1}: {docs} docs; docs per CPU second (wall) datatrove {runs['datatrove'][-1]:.1f} "
                f"({wall['datatrove'][-1]:.1f}), ours {runs['ours'][-1]:.1f} ({wall['ours'][-1]:.1f}), "
                f"ours no pre-check {runs['ours, no pre-check'][-1]:.1f} ({wall['ours, no pre-check'][-1]:.1f})",
                flush=True,
            )
    base, wall_base = median(runs["datatrove"]), median(wall["datatrove"])
    summary = {}
    header = f"{'docs/s/core (median)':>22} {'ratio':>7} {'wall docs/s':>12} {'ratio':>7} {'agreement':>10}"
    print(f"\n{'pipeline':22} {header}")
    for name, values in runs.items():
        ratio, wall_ratio = median(values) / base, median(wall[name]) / wall_base
        agree = min(agreement[name]) if name in agreement else 1.0
        summary[name] = {
            "docs_per_cpu_s": values, "median": median(values), "ratio": ratio,
            "wall_docs_per_s": wall[name], "wall_median": median(wall[name]), "wall_ratio": wall_ratio,
            "agreement": agree,
        }
        print(
            f"{name:22} {median(values):>22.1f} {ratio:>6.2f}x {median(wall[name]):>12.1f} {wall_ratio:>6.2f}x"
            f" {agree:>10.4f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
