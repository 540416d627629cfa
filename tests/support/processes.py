"""A process's descendants from /proc (Linux), and waiting for them to end: for tests that kill a parent; a
process's own peak memory."""

from __future__ import annotations

import os
import time
from pathlib import Path


def peak_rss_kib() -> int:
    """This process's own peak resident set (``VmHWM``, KiB). Not ``ru_maxrss``: Linux keeps it across
    ``execve``, so a child started from a big parent (pytest late in a run) reports the parent's size."""
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


def _parents() -> dict[int, int]:
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if fields[0] != "Z":  # a zombie has ended; only its parent's wait is missing
            out[int(stat.parent.name)] = int(fields[1])
    return out


def generations(pid: int) -> list[set[int]]:
    """Live descendants of `pid` by generation: [children, grandchildren, ...]."""
    parents = _parents()
    out: list[set[int]] = []
    seen, frontier = {pid}, {pid}
    while True:
        frontier = {child for child, parent in parents.items() if parent in frontier} - seen
        if not frontier:
            return out
        out.append(frontier)
        seen |= frontier


def descendants(pid: int) -> set[int]:
    """Live descendants of `pid` (children, grandchildren, ...)."""
    return set().union(*generations(pid))


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (not zombies)."""
    parents = _parents()
    return {pid for pid in pids if pid in parents}


def wait_gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    """Wait until every pid has ended; returns those still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def kill_all(pids: set[int]) -> None:
    """Clean up after a failed assertion (only the pids the test found)."""
    for pid in alive(pids):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
