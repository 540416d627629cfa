"""Curation into an S3 bucket against curation onto local disk, same input, side by side.

    python -m bench.object_store [--repeats 3] [--warcs WARC ...]

Starts moto's S3 server on 127.0.0.1 (``tests.support.s3_server``; the real s3fs / botocore client over
HTTP), then runs ``python -m pipelines.run`` (curate + dedup + report, local executor) alternately with
``--out`` a local temp folder and ``--out s3://bench/run-N``, ``--repeats`` times each. Prints the median
wall time of each, the throughput ratio (S3 / local documents per second; goal >= 0.9), and the requests
the run sent to the store, by HTTP method, per document read (the server's request log). moto keeps
objects in memory on this machine, so the ratio measures the client side (staging, uploads, listings,
the per-request round trips), not a real store's latency or bandwidth.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from statistics import median

from pipelines.sample import SAMPLE_WARC
from tests.support.s3_server import S3Server, subprocess_env

REPO = Path(__file__).resolve().parents[1]
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) ')
DOCUMENTS = re.compile(r"^url\s+(\d[\d,]*)\s", re.MULTILINE)  # the first step's "in": HTML documents read


def run_once(server: S3Server, out: str, warcs: list[str], scratch: str) -> tuple[float, int]:
    """Wall seconds and documents read of one ``pipelines.run`` to ``out``."""
    env = subprocess_env(server, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.run", *warcs, "--dump", "bench", "--out", out, "--scratch", scratch]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{out}: pipelines.run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = DOCUMENTS.search(proc.stdout)
    return seconds, int(found.group(1).replace(",", "")) if found else 0


def requests(log: Path, start: int) -> Counter:
    """Requests by method in the server's log after byte offset ``start``."""
    with log.open("rb") as f:
        f.seek(start)
        return Counter(REQUEST.findall(f.read().decode("utf-8", "replace")))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.object_store", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warcs", nargs="+", default=[str(SAMPLE_WARC)], help="input WARC files (default: sample)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
        log = Path(tmp, "moto.log")
        server = S3Server(log=log).start()
        try:
            with server.use():
                server.make_bucket("bench")
                local, remote, per_run = [], [], []
                docs = 0
                for i in range(args.repeats):
                    seconds, docs = run_once(server, str(Path(tmp, f"local-{i}")), args.warcs, tmp)
                    local.append(seconds)
                    offset = log.stat().st_size
                    seconds, docs = run_once(server, f"s3://bench/run-{i}", args.warcs, tmp)
                    remote.append(seconds)
                    time.sleep(0.5)  # the server's last log lines
                    per_run.append(requests(log, offset))
        finally:
            server.stop()
    ratio = median(local) / median(remote)
    sent = per_run[-1]
    shape = f"{len(args.warcs)} WARC file(s), {docs} HTML documents"
    print(f"input: {shape}; {args.repeats} repeats, {os.cpu_count()} CPUs")
    print(f"{'out':10} {'wall s (median)':>16} {'docs/s':>8}   runs")
    for name, times in (("local", local), ("s3 (moto)", remote)):
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(f"{name:10} {median(times):>16.1f} {docs / median(times):>8.2f}   {runs}")
    print(f"throughput ratio s3 / local: {ratio:.2f}x (goal >= 0.9x)")
    total = sum(sent.values())
    methods = ", ".join(f"{m} {n}" for m, n in sent.most_common())
    print(f"requests to the store per run: {total} ({methods}); {total / max(docs, 1):.2f} per document read")


if __name__ == "__main__":
    main()
