"""``python -m trainer.plot LOG.jsonl``: loss, validation loss and LR curves of a training run, to PNG.

The trainer's ``metrics.jsonl`` has one record per logged step (``loss``, ``lr``, ``grad_norm``,
``tokens_per_s``, ...) and separate evaluation records (``val_loss``; with ``--eval-task`` also
``bpb``, ``blimp``, ``mc_acc``, ``mc_acc_norm``, drawn on two more panels). It is opened in append mode, so a resumed
run logs the steps after its checkpoint again: the last record of a step wins. Lines that are not
JSON (a run killed mid-write) and keys a record lacks are skipped, not fatal. Panels for grad norm
and throughput are drawn when the log has them.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from common.bounded_input import MAX_DATA_BYTES, loads_json, read_bounded
from common.cli import ArgumentParser, one_line

Series = dict[str, list[tuple[int, float]]]
# (panel title, keys drawn on it, log-scale y)
PANELS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("loss", ("loss", "val_loss"), False),
    ("learning rate", ("lr",), False),
    ("grad norm", ("grad_norm",), True),
    ("throughput (tokens/s)", ("tokens_per_s",), False),
    ("bits per byte (--eval-task bpb)", ("bpb",), False),
    ("accuracy (--eval-task blimp, mc)", ("blimp", "mc_acc", "mc_acc_norm"), False),
    ("CORE, centred (--eval-task core)", ("core", "core_v2"), False),
    ("gold probability (mc, core)", ("mc_gold_prob", "core_gold_prob"), False),
)
LABELS = {"loss": "train loss", "val_loss": "validation loss", "blimp": "BLiMP", "mc_acc": "mc acc"}
# evaluated now and then: drawn with markers
POINTS = {"val_loss", "bpb", "blimp", "mc_acc", "mc_acc_norm", "core", "core_v2", "mc_gold_prob", "core_gold_prob"}


def load_log(path: Path) -> tuple[Series, int]:
    """``({key: [(step, value), ...] sorted by step}, bad lines)``; the last value of a step wins."""
    values: dict[str, dict[int, float]] = {}
    bad = 0
    for line in read_bounded(path, MAX_DATA_BYTES).decode().splitlines():  # a FIFO or a 3 GiB file: refused
        if not line.strip():
            continue
        try:
            record = loads_json(line, path)
            step = int(record["step"])
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        for key, value in record.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                values.setdefault(key, {})[step] = float(value)
    return {k: sorted(v.items()) for k, v in values.items()}, bad


def plot_series(series: Series, out: Path, title: str = "") -> Path:
    """Draw the panels the series supports into one PNG."""
    panels = [p for p in PANELS if any(series.get(k) for k in p[1])]
    if not panels:
        raise ValueError("the log has no loss, val_loss, lr, grad_norm, tokens_per_s or evaluation values")
    fig = Figure(figsize=(10, 2.8 * len(panels)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, keys, log_y) in zip(axes, panels, strict=True):
        for key in keys:
            points = series.get(key) or []
            if not points:
                continue
            steps, vals = zip(*points, strict=True)
            style = {"marker": "o", "markersize": 4} if key in POINTS or len(points) == 1 else {}
            ax.plot(steps, vals, label=LABELS.get(key, key), **style)
        if log_y and all(v > 0 for k in keys for _, v in series.get(k) or []):
            ax.set_yscale("log")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if len([k for k in keys if series.get(k)]) > 1:
            ax.legend()
    axes[-1].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def plot_log(log: Path, out: Path | None = None) -> Path:
    """``LOG.jsonl`` -> ``LOG.png`` (or ``out``)."""
    series, _ = load_log(log)
    return plot_series(series, out or Path(log).with_suffix(".png"), title=str(log))


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m trainer.plot", description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="metrics.jsonl written by trainer/fsdp_train.py")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: LOG with .png)")
    args = parser.parse_args(argv)
    out = args.out or args.log.with_suffix(".png")
    try:
        if os.path.realpath(out) == os.path.realpath(args.log):  # the PNG would replace the log it is drawn from
            raise ValueError(f"--out {out} is the log itself; choose another PNG path")
        series, bad = load_log(args.log)
        out = plot_series(series, out, title=str(args.log))
    except (OSError, ValueError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{k}: {len(v)}" for k, v in series.items() if k in {k for p in PANELS for k in p[1]})
    print(f"{out} ({counts}" + (f"; {bad} unreadable lines skipped" if bad else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
