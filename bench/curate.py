"""Curate-stage speed: ours (each extractor and WARC reader) against datatrove's FineWeb reference
pipeline, same input, one run.

Input: the ``html_extraction_*`` pages wrapped into a WARC plus the real ``warc_samples`` files
(the parity corpus). Each repetition runs, one after another on one core each: datatrove's
examples/fineweb.py steps, and our curate stage with the FineWeb recipe as it ships (trafilatura +
warcio, the parity path), with resiliparse instead of trafilatura (warcio), and with resiliparse read
by fastwarc (the extraction and reader of ``pipelines/recipes/dclm.yaml``: resiliparse without the
language pre-check, which pays only before an expensive extractor; the FineWeb rules otherwise, so only
extraction and reading change), and the DCLM recipe's curate stage as it ships (the same, with DCLM's own
heuristics instead of FineWeb's four families: a different recipe, so its agreement with datatrove's
FineWeb steps is not parity). ``--other-precheck`` adds the trafilatura and the resiliparse +
fastwarc paths with the other pre-check setting. Prints documents per second per core, medians over the
repetitions, the ratios to datatrove, and the keep/drop agreement of each run with the reference (the
goal for the trafilatura path; for resiliparse it shows how much another extractor's text changes the
rules' verdicts).

Per core = documents / CPU seconds of the run (the process and its extraction sandbox child, see
``tests.support.parity.cpu_clock``): each pipeline is sequential, so on an idle machine that equals
wall time, and on a shared one other jobs do not inflate it. Wall-clock figures are printed too.

Each pipeline first processes a small warm-up WARC with the same step objects, untimed: the
one-time loading (URL blocklists ~5 s, spaCy, fastText) is paid once per task, and a production
task reads a 1 GB WARC, so the timed figure is the per-document throughput both sides reach.
Each run happens in a fresh fork of the bench process, so no run starts with caches that an earlier
run filled with these same documents (our fastText word cache, spaCy's, trafilatura's LRU).

    python -m bench.curate [--repeats 3] [--timeout 10] [--other-precheck] [--only DCLM ...] [--json out.json]

``--only`` times datatrove and the rows whose names hold one of the given words (case-insensitive), not all
of them: one recipe's row on a shared machine.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

from common.cli import ArgumentParser, fail
from curate.config import CurateConfig
from pipelines.recipe import load_recipe
from tests.support import shared_data
from tests.support.parity import curate_decisions, disagreements, reference_decisions
from tests.support.warc_writer import Page, write_pages

T = TypeVar("T")
DCLM_RECIPE = Path(__file__).resolve().parents[1] / "pipelines" / "recipes" / "dclm.yaml"


def variants(config: CurateConfig, other_precheck: bool) -> dict[str, CurateConfig]:
    """Our pipelines to time: the recipe as it ships, then the extraction and reading of
    ``pipelines/recipes/dclm.yaml`` (resiliparse without the language pre-check; warcio, then fastwarc)."""
    dclm = load_recipe(DCLM_RECIPE).curate
    resiliparse = dataclasses.replace(
        config,
        extraction=dataclasses.replace(
            config.extraction, extractor=dclm.extraction.extractor, precheck=dclm.extraction.precheck
        ),
    )
    out = {
        "trafilatura + warcio": config,
        "resiliparse + warcio": resiliparse,
        "resiliparse + fastwarc": dataclasses.replace(resiliparse, reader=dclm.reader),
        # a different recipe (its agreement with datatrove's FineWeb steps is not a parity figure)
        "DCLM recipe (resiliparse + fastwarc + DCLM heuristics)": dataclasses.replace(
            resiliparse, reader=dclm.reader, signals=dclm.signals
        ),
    }
    if other_precheck:  # each extractor with the other pre-check setting
        def flipped(variant: CurateConfig) -> CurateConfig:
            precheck = variant.extraction.precheck
            flip = dataclasses.replace(precheck, enabled=not precheck.enabled)
            return dataclasses.replace(variant, extraction=dataclasses.replace(variant.extraction, precheck=flip))

        for name in ("trafilatura + warcio", "resiliparse + fastwarc"):
            setting = "with" if not out[name].extraction.precheck.enabled else "no"
            out[f"{name}, {setting} pre-check"] = flipped(out[name])
    return out


def in_fresh_process(job: Callable[[], T]) -> T:
    """``job()`` run in a fork of this process (which has run no pipeline), its result sent back."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_send_result, args=(job, send))
    child.start()
    send.close()
    try:
        failed, result = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the bench child died (exit code {child.exitcode})") from None
    child.join()
    if failed:
        raise RuntimeError(f"the bench child failed: {result}")
    return result


def _send_result(job: Callable[[], Any], send: Any) -> None:
    try:
        send.send((False, job()))
    except Exception as err:  # reported by the parent
        send.send((True, f"{type(err).__name__}: {err}"))


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=10.0, help="per-page extraction limit, both sides")
    parser.add_argument(
        "--other-precheck", action="store_true", help="also time both extractors with the other pre-check setting"
    )
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="WORD", help="only the rows whose names hold one of these words"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ours = variants(load_recipe().curate, args.other_precheck)
    if args.only:
        ours = {name: c for name, c in ours.items() if any(w.lower() in name.lower() for w in args.only)}
        if not ours:
            fail(f"--only {' '.join(args.only)}: no row's name holds any of these words")
    anchor = next(iter(ours))  # documents seen = datatrove's and this row's (the parity path when timed)
    with tempfile.TemporaryDirectory() as tmp:
        pages = Path(tmp) / "pages.warc.gz"
        shared_data.write_extraction_warc(pages)
        files = [pages, *shared_data.warc_sample_files()]
        warmup = [Path(tmp) / "warmup.warc.gz"]
        body = "<p>Warm-up page {i}: the committee met on Tuesday to discuss the plans for the library.</p>"
        write_pages([Page(f"https://warmup.example/{i}", f"<html><body>{body.format(i=i) * 8}</body></html>".encode())
                     for i in range(4)], warmup[0])
        jobs = {"datatrove": partial(reference_decisions, files, args.timeout, warmup)}
        jobs |= {name: partial(curate_decisions, files, config, args.timeout, warmup) for name, config in ours.items()}
        runs: dict[str, list[float]] = {name: [] for name in jobs}
        wall: dict[str, list[float]] = {name: [] for name in jobs}
        agreement: dict[str, list[float]] = {name: [] for name in ours}
        extraction: dict[str, list[float]] = {name: [] for name in jobs}
        rest: dict[str, list[float]] = {name: [] for name in jobs}
        order = list(jobs)
        for rep in range(args.repeats):
            # rotate the order so that a slow period of a noisy machine does not always hit one pipeline
            shift = rep % len(order)
            results = {name: in_fresh_process(jobs[name]) for name in order[shift:] + order[:shift]}
            ref = results["datatrove"]
            docs = len(ref.seen | results[anchor].seen)
            for name, result in results.items():
                runs[name].append(docs / result.cpu_seconds)
                wall[name].append(docs / result.seconds)
                extraction[name].append(result.extraction_seconds)
                rest[name].append(result.cpu_seconds - result.extraction_seconds)
                if name != "datatrove":
                    agreement[name].append(1 - len(disagreements(result, ref)) / docs)
            line = ", ".join(f"{name} {runs[name][-1]:.1f} ({wall[name][-1]:.1f})" for name in order)
            print(f"repeat {rep + 1}: {docs} docs; docs per CPU second (wall): {line}", flush=True)
    base, wall_base = median(runs["datatrove"]), median(wall["datatrove"])
    summary = {}
    header = f"{'docs/s/core (median)':>22} {'ratio':>7} {'wall docs/s':>12} {'ratio':>7} {'agreement':>10}"
    print(f"\n{'pipeline':40} {header}   ratios inside each repeat (their median)")
    for name, values in runs.items():
        ratio, wall_ratio = median(values) / base, median(wall[name]) / wall_base
        # the machine's speed drifts between repeats: a ratio inside one repeat compares like with like
        per_repeat = [ours / theirs for ours, theirs in zip(values, runs["datatrove"], strict=True)]
        agree = min(agreement[name]) if name in agreement else 1.0
        summary[name] = {
            "docs_per_cpu_s": values, "median": median(values), "ratio": ratio,
            "wall_docs_per_s": wall[name], "wall_median": median(wall[name]), "wall_ratio": wall_ratio,
            "agreement": agree, "ratio_per_repeat": per_repeat, "median_ratio_per_repeat": median(per_repeat),
            "extraction_seconds": extraction[name], "other_cpu_seconds": rest[name],
        }
        print(
            f"{name:40} {median(values):>22.1f} {ratio:>6.2f}x {median(wall[name]):>12.1f} {wall_ratio:>6.2f}x"
            f" {agree:>10.4f}   {', '.join(f'{r:.2f}x' for r in per_repeat)} ({median(per_repeat):.2f}x)"
        )
    print_time_split(extraction, rest)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


def print_time_split(extraction: dict[str, list[float]], rest: dict[str, list[float]]) -> None:
    """Where each pipeline's CPU time goes: its extraction step (seconds inside it, the wait for the
    sandbox child included) and everything else, medians over the repeats. The ratio each part
    reaches against datatrove's bounds the whole (Amdahl): e.g. the total budget of "10x datatrove"
    minus our extraction is what the rest may take."""
    print(f"\n{'CPU seconds (median)':40} {'extraction':>12} {'ratio':>7} {'everything else':>16} {'ratio':>7}")
    base_extraction, base_rest = median(extraction["datatrove"]), median(rest["datatrove"])
    for name in extraction:
        ext, other = median(extraction[name]), median(rest[name])
        print(f"{name:40} {ext:>12.2f} {base_extraction / ext:>6.1f}x {other:>16.2f} {base_rest / other:>6.1f}x")


if __name__ == "__main__":
    main()
