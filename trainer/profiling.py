"""Where a step's time and memory go: torch.profiler traces for chosen steps, a CUDA memory snapshot on OOM.

`--profile-steps A:B` records optimizer steps A..B (1-based, inclusive) on every rank with shapes and
memory and writes one Chrome trace per rank, `OUT/profile/rank{R}_steps{A}-{B}.json` (open it in
chrome://tracing or Perfetto), as torchtitan's profiling does. `--oom-snapshot` (CUDA) records the
allocator's history from the start and, when a step runs out of memory, dumps
`OUT/profile/oom_rank{R}.pickle` for https://pytorch.org/memory_viz before re-raising. Without the
flags nothing is recorded and the hooks are two integer comparisons a step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

log = logging.getLogger(__name__)


def parse_steps(spec: str) -> tuple[int, int]:
    """ "A:B" -> (A, B), 1 <= A <= B; a one-line error otherwise."""
    try:
        first, last = (int(part) for part in spec.split(":"))
    except ValueError:
        raise ValueError(f"--profile-steps must be A:B (optimizer steps, 1-based), got {spec!r}") from None
    if not 1 <= first <= last:
        raise ValueError(f"--profile-steps {spec}: need 1 <= A <= B")
    return first, last


class StepProfiler:
    """Starts torch.profiler before step A, stops and exports after step B (or at `close`)."""

    def __init__(self, spec: str | None, out: Path, rank: int, device: torch.device) -> None:
        self.window = parse_steps(spec) if spec else None
        self.dir, self.rank, self.device = out / "profile", rank, device
        self.active: profile | None = None
        self.trace: Path | None = None

    def before_step(self, step: int) -> None:
        if self.window is None or step != self.window[0]:
            return
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.active = profile(activities=activities, record_shapes=True, profile_memory=True)
        self.active.__enter__()

    def after_step(self, step: int) -> None:
        if self.active is not None and self.window is not None and step >= self.window[1]:
            self._export(step)

    def close(self, step: int) -> None:
        """The run ended inside the window (e.g. --max-steps): export what was recorded."""
        if self.active is not None:
            self._export(step)

    def _export(self, step: int) -> None:
        assert self.active is not None and self.window is not None
        self.active.__exit__(None, None, None)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.trace = self.dir / f"rank{self.rank}_steps{self.window[0]}-{step}.json"
        self.active.export_chrome_trace(str(self.trace))
        self.active = None
        log.info("profiler trace of steps %d-%d: %s", self.window[0], step, self.trace)


@contextmanager
def oom_snapshot(enabled: bool, out: Path, rank: int, device: torch.device) -> Iterator[None]:
    """Record CUDA allocator history; on OutOfMemoryError dump it, then re-raise."""
    if not enabled or device.type != "cuda":
        yield
        return
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        path = out / "profile" / f"oom_rank{rank}.pickle"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(path))
        log.error("out of memory: allocator snapshot in %s", path)
        raise
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
