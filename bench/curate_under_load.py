"""Curate-stage decisions under load: the same held-out pages on a quiet machine and with CPU-bound processes
running beside it must give the same keep/drop decisions and reasons (issue 30).

    python -m bench.curate_under_load [--sets html_extraction_readability ...] [--busy 2] [--timeout 1.0]

The extraction and signal sandboxes count the child's CPU seconds (``common.sandbox.CpuTimedSandbox``), so
a page's fate should not depend on what else runs; with wall-clock limits the audit saw agreement 0.9834 at
load 11 and two identical runs differ. The run goes: quiet, loaded (``--busy`` processes spinning on the
CPU beside it, started and stopped by this script), quiet again (the run-to-run baseline). Prints one JSON
object: per run the pages seen, kept, timeouts, CPU and wall seconds; and the documents whose decision or
reason differs from the first quiet run. ``--timeout`` sets the extraction limit of both runs (the recipe
ships 1 s; a small limit such as 0.1 s puts many pages near it, the hardest case for parity).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

from common.cli import ArgumentParser
from tests.support import shared_data
from tests.support.parity import Decisions, curate_decisions


def _spin() -> None:
    while True:
        pass


def _timeouts(run: Decisions) -> int:
    return sum(1 for reason in run.reasons.values() if "timeout" in reason)


def _summary(run: Decisions) -> dict[str, float | int]:
    return {
        "seen": len(run.seen),
        "kept": len(run.kept),
        "timeouts": _timeouts(run),
        "cpu_s": round(run.cpu_seconds, 1),
        "wall_s": round(run.seconds, 1),
    }


def _differences(run: Decisions, base: Decisions) -> list[dict[str, str]]:
    """Documents decided differently from `base`: kept by one only, or dropped for another reason."""
    rows = []
    for doc in sorted(run.seen | base.seen):
        mine = "kept" if doc in run.kept else run.reasons.get(doc, "not seen")
        theirs = "kept" if doc in base.kept else base.reasons.get(doc, "not seen")
        if mine != theirs:
            rows.append({"id": doc, "run": mine, "quiet": theirs})
    return rows


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(shared_data.EXTRACTION_SETS), help="extraction sets")
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the loaded run")
    parser.add_argument("--timeout", type=float, default=None, help="extraction limit, s (default: the recipe's)")
    args = parser.parse_args()
    if not shared_data.available():
        sys.exit(f"shared data not found at {shared_data.shared_data_dir()}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        pages = Path(tmp) / "pages.warc.gz"
        shared_data.write_extraction_warc(pages, tuple(args.sets))
        quiet = curate_decisions([pages], timeout=args.timeout)
        busy = [multiprocessing.get_context("fork").Process(target=_spin, daemon=True) for _ in range(args.busy)]
        for process in busy:
            process.start()
        try:
            loaded = curate_decisions([pages], timeout=args.timeout)
            load = os.getloadavg()[0]
        finally:
            for process in busy:
                process.kill()
                process.join()
        again = curate_decisions([pages], timeout=args.timeout)
    report = {
        "sets": args.sets,
        "busy_processes": args.busy,
        "extraction_timeout_s": args.timeout,
        "load_average_during_loaded_run": round(load, 1),
        "quiet": _summary(quiet),
        "loaded": _summary(loaded),
        "quiet_again": _summary(again),
        "loaded_vs_quiet": _differences(loaded, quiet),
        "quiet_again_vs_quiet": _differences(again, quiet),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
