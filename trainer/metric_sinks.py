"""Where the metrics records go besides `metrics.jsonl`: TensorBoard event files (`--log-to tensorboard`).

Each numeric top-level field of a record (loss, grad_norm, lr, tokens_per_s, mfu, val_loss, moe_max_load,
...) becomes a scalar of that name at the record's step; nested details (per-task metrics, per-expert
loads) stay in `metrics.jsonl`. Only the main rank writes (the logger is off on the others). A resumed run
purges the events after its checkpoint's step, as `metrics.jsonl` drops those records, so each step
appears once. Weights & Biases is not wired: the package is not installed here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

SINKS = ("tensorboard",)


class MetricSink(Protocol):
    def log(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Scalars into `root` (torch's SummaryWriter: TensorBoard's own event-file writer)."""

    def __init__(self, root: Path, start_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        purge = start_step + 1 if start_step else None  # events of steps the resumed run logs again
        self.writer = SummaryWriter(log_dir=str(root), purge_step=purge)

    def log(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if not isinstance(step, int):
            return
        for name, value in record.items():
            if name != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value):
                    self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def parse_sinks(spec: str | None) -> list[str]:
    """`tensorboard` (comma-separated list) -> names; a ValueError (one line) for an unknown or unusable one."""
    names = [s.strip() for s in (spec or "").split(",") if s.strip()]
    unknown = sorted(set(names) - set(SINKS))
    if unknown:
        raise ValueError(f"--log-to: unknown sink(s) {unknown}; choose from {list(SINKS)}")
    if "tensorboard" in names:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise ValueError("--log-to tensorboard needs the tensorboard package (pip install tensorboard)") from None
    return names


def open_sinks(spec: str | None, out: Path, enabled: bool, start_step: int | None) -> list[MetricSink]:
    """The sinks of `--log-to` under `out` (`out/tensorboard/`), on the main rank only."""
    if not enabled:
        return []
    return [TensorBoardSink(out / "tensorboard", start_step) for name in parse_sinks(spec) if name == "tensorboard"]
