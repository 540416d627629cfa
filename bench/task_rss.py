"""Peak memory of one curate task (the process, its Manager server and its sandbox children), sampled.

    python -m bench.task_rss WARC [WARC ...] [--recipe FILE]

Runs ``python -m pipelines.run WARC --workers 1 --no-dedup`` once per input (one task, all of its
children) and samples every process of the tree from /proc every 50 ms: the peak of the summed RSS
(shared pages of forked children counted once per process, an upper bound), the peak of the summed PSS
(shared pages split between the processes that map them) and the largest single process. The figure
curate/README.md states is the summed RSS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.cli import ArgumentParser

REPO = Path(__file__).resolve().parents[1]


def _tree(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    found, frontier = {root}, {root}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes, 0 when the process is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    except (OSError, ValueError):
        return 0, 0
    return int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024


def measure(warc: str, recipe: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "pipelines.run", warc, "--out", out, "--workers", "1", "--no-dedup"]
        cmd += ["--recipe", recipe] if recipe else []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak_rss = peak_pss = peak_one = 0
        while proc.poll() is None:
            sizes = [_memory(pid) for pid in _tree(proc.pid)]
            peak_rss = max(peak_rss, sum(r for r, _ in sizes))
            peak_pss = max(peak_pss, sum(p for _, p in sizes))
            peak_one = max([peak_one, *(r for r, _ in sizes)])
            time.sleep(0.05)
        if proc.returncode != 0:
            raise SystemExit(f"{warc}: pipelines.run failed ({proc.returncode})")
    mib = 2**20
    return {"rss_mib": peak_rss / mib, "pss_mib": peak_pss / mib, "largest_mib": peak_one / mib,
            "seconds": time.perf_counter() - start}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warcs", nargs="+")
    parser.add_argument("--recipe", default=None)
    args = parser.parse_args(argv)
    print(f"{'input':<48} {'sum RSS':>9} {'sum PSS':>9} {'largest':>9} {'seconds':>8}")
    for warc in args.warcs:
        m = measure(warc, args.recipe)
        print(f"{Path(warc).name[:48]:<48} {m['rss_mib']:>7.0f}Mi {m['pss_mib']:>7.0f}Mi {m['largest_mib']:>7.0f}Mi "
              f"{m['seconds']:>8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
