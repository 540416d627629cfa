"""Where the metrics records go besides `metrics.jsonl`: TensorBoard event files and Weights & Biases runs
(`--log-to tensorboard,wandb`).

Each numeric top-level field of a record (loss, grad_norm, lr, tokens_per_s, mfu, val_loss, moe_max_load,
...) becomes a scalar of that name at the record's step; nested details (per-task metrics, per-expert
loads) stay in `metrics.jsonl`. Only the main rank writes (the logger is off on the others). A resumed run
purges the events after its checkpoint's step, as `metrics.jsonl` drops those records, so each step
appears once.

W&B runs offline by default (`OUT/wandb/offline-run-*/`, uploaded later with `wandb sync`); online only
when the user says so with `WANDB_MODE=online` (and their login / `WANDB_API_KEY`). A resumed run keeps
the W&B run id (`OUT/wandb/run_id`): each (re)start writes its own offline folder under that id, and
`wandb sync` merges them. W&B cannot drop logged steps as TensorBoard's purge does: a resume from an
earlier checkpoint than the last logged step logs those steps again in the next folder.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Any, Protocol

SINKS = ("tensorboard", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


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
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """The same scalars as W&B history at the record's step (`wandb.init` / `run.log`, W&B's own writer)."""

    def __init__(self, out: Path, start_step: int | None) -> None:
        import wandb

        root = out / "wandb"
        root.mkdir(parents=True, exist_ok=True)
        id_file = root / "run_id"
        resumed = bool(start_step) and id_file.is_file()
        run_id = id_file.read_text().strip() if resumed else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        # no links: an output folder holds none (common.lock.refuse_planted_links); no console or system capture
        settings = wandb.Settings(console="off", x_disable_stats=True, save_code=False, silent=True, symlink=False)
        self.wandb = wandb
        project, mode = os.environ.get("WANDB_PROJECT", "cc2model"), os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(project=project, dir=str(out), id=run_id, resume="allow", mode=mode, settings=settings)
        self.folder = Path(self.run.settings.sync_dir)  # OUT/wandb/offline-run-*/ (or run-*/ online)
        self._drop_links()

    def _drop_links(self) -> None:
        """wandb-core links `logs/debug-core.log` to its cache (~/.cache/wandb/logs/), even with symlink=False;
        an output folder holds no links (a resume refuses them), and it writes through its own handle."""
        for path in self.folder.rglob("*"):
            if path.is_symlink():
                path.unlink()

    def log(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if isinstance(step, int):
            self.run.log(scalars(record), step=step)

    def close(self) -> None:
        self.run.finish()
        self.wandb.teardown()
        self._drop_links()  # stops the wandb-core service this run started


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """A record's finite numeric top-level fields but the step: what the sinks plot."""
    return {
        name: value
        for name, value in record.items()
        if name != "step" and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def parse_sinks(spec: str | None) -> list[str]:
    """`tensorboard` (comma-separated list) -> names; a ValueError (one line) for an unknown or unusable one."""
    names = [s.strip() for s in (spec or "").split(",") if s.strip()]
    unknown = sorted(set(names) - set(SINKS))
    if unknown:
        raise ValueError(f"--log-to: unknown sink(s) {unknown}; choose from {list(SINKS)}")
    for name in names:
        try:
            __import__(PACKAGES[name])
        except ImportError:
            raise ValueError(f"--log-to {name} needs the {name} package (pip install {PACKAGES[name]})") from None
    return names


def open_sinks(spec: str | None, out: Path, enabled: bool, start_step: int | None) -> list[MetricSink]:
    """The sinks of `--log-to` under `out` (`out/tensorboard/`, `out/wandb/`), on the main rank only."""
    if not enabled:
        return []
    names = parse_sinks(spec)
    sinks: list[MetricSink] = []
    if "tensorboard" in names:
        sinks.append(TensorBoardSink(out / "tensorboard", start_step))
    if "wandb" in names:
        sinks.append(WandbSink(out, start_step))
    return sinks
