"""The report's PNG plots, drawn from the report data (``report.json``), never from the files again.

Figures are built on matplotlib's Agg canvas directly (no pyplot, no global backend switch), so a
report can be written from a worker process or a headless machine. Each function returns the PNG's
path, or None when the run has nothing to plot (no classifier ran, no dedup stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from common.atomic import atomic_open
from common.storage import is_remote

KEPT, REMOVED, NEUTRAL = "#2b8a3e", "#c92a2a", "#1c7ed6"
PALETTE = ("#1c7ed6", "#e8590c", "#2b8a3e", "#c92a2a", "#7048e8", "#0c8599", "#d6336c", "#5c940d", "#e67700")
TOP_N = 15
# a funnel bar's label: centred on the bar, white on a dark box so it reads on any bar length
BAR_LABEL = {"ha": "center", "va": "center", "color": "white", "fontweight": "bold", "fontsize": 9}
BAR_LABEL_BOX = {"facecolor": "#00000055", "edgecolor": "none", "pad": 1}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    with atomic_open(path) as handle:  # a local file or an object in the run's store
        fig.savefig(handle, format="png", dpi=100)
    return path


def _axes(height: float, title: str, xlabel: str, ylabel: str | None = None) -> tuple[Figure, Axes]:
    """A one-panel figure with its title and axis labels."""
    fig = Figure(figsize=(10, height))
    ax = fig.subplots()
    ax.set(title=title, xlabel=xlabel, **({"ylabel": ylabel} if ylabel else {}))
    return fig, ax


def _hbars(ax: Axes, labels: Sequence[str], values: Sequence[int], color, **options) -> np.ndarray:
    """Horizontal bars, the first at the top; returns their y positions (``fontsize`` sizes the labels)."""
    y = np.arange(len(labels))[::-1]
    tick_options = {"fontsize": options.pop("fontsize")} if "fontsize" in options else {}
    ax.barh(y, values, color=color, **options)
    ax.set_yticks(y, labels, **tick_options)
    return y


def _fmt(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:,.0f}"


def _funnel_panel(ax: Axes, labels: list[str], values: list[int | None], title: str, color: str) -> None:
    known = [v for v in values if v is not None]
    top = max(known) if known else 1
    start = known[0] if known else 1
    y = np.arange(len(labels))[::-1]
    for yi, value in zip(y, values, strict=True):
        if value is None:
            ax.text(top / 2, yi, "n/a (HTML, before extraction)", ha="center", va="center", color="#868e96")
            continue
        ax.barh(yi, value, left=(top - value) / 2, color=color, height=0.7)
        share = 100 * value / start if start else 0
        ax.text(top / 2, yi, f"{_fmt(value)}  ({share:.1f}%)", **BAR_LABEL, bbox=BAR_LABEL_BOX)
    ax.set_yticks(y, labels)
    ax.set(xticks=[], xlim=(0, top), title=title)
    ax.spines[["top", "right", "bottom"]].set_visible(False)


def plot_funnel(data: dict, path: Path) -> Path | None:
    """Documents and tokens kept after each step, as a funnel (FineWeb blog style)."""
    rows = data["funnel"]
    if not rows:
        return None
    labels = [r["label"] for r in rows]
    fig = Figure(figsize=(12, 0.45 * len(rows) + 1.6))
    ax_docs, ax_tok = fig.subplots(1, 2, sharey=True)
    _funnel_panel(ax_docs, labels, [r["docs"] for r in rows], "documents kept after each step\n", NEUTRAL)
    token_title = "tokens kept after each step\n(" + data["token_note"] + ")"
    _funnel_panel(ax_tok, labels, [r["tokens"] for r in rows], token_title, "#7048e8")
    return _save(fig, path)


def plot_removals(data: dict, path: Path) -> Path | None:
    """Documents removed by each rule (step: reason), coloured by step, in pipeline order."""
    rows = [r for r in data["removals"] if r["count"] > 0]
    if not rows:
        return None
    steps = list(dict.fromkeys(r["step"] for r in rows))
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(steps)}
    fig, ax = _axes(0.32 * len(rows) + 1.2, "removals by rule", "documents removed")
    labels = [f"{r['step']}: {r['reason']}" for r in rows]
    _hbars(ax, labels, [r["count"] for r in rows], [colors[r["step"]] for r in rows], fontsize=9)
    ax.bar_label(ax.containers[0], [f" {r['count']:,}" for r in rows], fontsize=8)
    ax.margins(x=0.12)
    return _save(fig, path)


def plot_languages(data: dict, path: Path) -> Path | None:
    """Detected language of every identified document, kept vs removed (top languages)."""
    kept, removed = data["languages"]["kept"], data["languages"]["removed"]
    total = {k: kept.get(k, 0) + removed.get(k, 0) for k in {*kept, *removed}}
    if not total:
        return None
    langs = sorted(total, key=lambda lang: (-total[lang], lang))[:TOP_N]
    others = sum(total.values()) - sum(total[x] for x in langs)
    title = "language distribution" + (f" (+{others:,} in other languages)" if others else "")
    fig, ax = _axes(0.3 * len(langs) + 1.3, title, "documents")
    k = [kept.get(x, 0) for x in langs]
    y = _hbars(ax, langs, k, KEPT, label="kept")
    ax.barh(y, [removed.get(x, 0) for x in langs], left=k, color=REMOVED, label="removed")
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_lengths(data: dict, path: Path) -> Path:
    """Document length (tokens) histograms: after extraction vs kept at the end."""
    edges = np.asarray(data["lengths"]["edges"])
    xlabel = f"document length (tokens; {data['token_note']})"
    fig, ax = _axes(4, "document length before and after filtering", xlabel, "documents")
    lefts = np.maximum(edges[:-1], 0.5)  # the 0-token bin is drawn at 0.5 on the log axis
    bins = np.concatenate([lefts, edges[-1:]])
    for key, label, color in (("before", "after extraction (before filters)", REMOVED), ("after", "kept", KEPT)):
        counts, before = np.asarray(data["lengths"][key]), key == "before"
        label = f"{label}: {counts.sum():,} docs"
        ax.stairs(counts, bins, label=label, color=color, fill=before, alpha=0.35 if before else 1.0, linewidth=2)
    ax.set_xscale("log")
    filled = np.flatnonzero(np.asarray(data["lengths"]["before"]) + np.asarray(data["lengths"]["after"]))
    if len(filled):  # zoom on the occupied bins, a bin either side
        ax.set_xlim(lefts[max(filled[0] - 1, 0)], edges[min(filled[-1] + 2, len(edges) - 1)])
    ax.legend()
    return _save(fig, path)


def plot_quality(data: dict, path: Path) -> Path | None:
    """Quality-classifier score histograms of kept and removed documents (only when one ran)."""
    quality = data.get("quality")
    if not quality:
        return None
    fig, ax = _axes(4, "quality-score distribution", "quality_score", "documents")
    edges = np.asarray(quality["edges"])
    for key, color in (("kept", KEPT), ("removed", REMOVED)):
        counts = np.asarray(quality[key])
        if counts.sum():
            ax.stairs(counts, edges, label=f"{key}: {counts.sum():,} docs", color=color, fill=True, alpha=0.45)
    ax.legend()
    return _save(fig, path)


def plot_clusters(data: dict, path: Path) -> Path | None:
    """Number of MinHash clusters of each size (size 1: a document with no near-duplicate)."""
    clusters = data.get("clusters")
    if not clusters:
        return None
    sizes = sorted(int(s) for s in clusters["sizes"])
    counts = [clusters["sizes"][str(s)] for s in sizes]
    title = f"dedup cluster sizes: {clusters['duplicates_removed']:,} near-duplicates removed"
    fig, ax = _axes(4, title, "cluster size (documents)", "clusters (kept documents)")
    bars = ax.bar([str(s) for s in sizes], counts, color=NEUTRAL)
    if max(counts) > 20 * min(counts):  # singletons usually dwarf the rest
        ax.set(yscale="log", ylim=(0.8, None))
    ax.bar_label(bars, [f"{c:,}" for c in counts], fontsize=8)
    return _save(fig, path)


def plot_domains(data: dict, path: Path) -> Path | None:
    """Top domains of kept and of removed documents, side by side."""
    domains = data["domains"]
    if not domains["kept"] and not domains["removed"]:
        return None
    rows = max(len(domains["kept"]), len(domains["removed"]), 1)
    fig = Figure(figsize=(13, 0.3 * rows + 1.3))
    for ax, key, color in zip(fig.subplots(1, 2), ("kept", "removed"), (KEPT, REMOVED), strict=True):
        items = domains[key]
        _hbars(ax, [d[:40] for d, _ in items], [n for _, n in items], color, fontsize=8)
        ax.set(title=f"top domains {key}", xlabel="documents")
    return _save(fig, path)


PLOTS = (plot_funnel, plot_removals, plot_languages, plot_lengths, plot_quality, plot_clusters, plot_domains)


def draw_all(data: dict, folder: Path) -> dict[str, str]:
    """Every plot the run supports, as ``{name: file name}`` relative to ``folder`` (``plot_<name>`` draws it)."""
    if not is_remote(folder):  # an object store has no folders to make
        folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for plot in PLOTS:
        name = plot.__name__.removeprefix("plot_")
        path = plot(data, folder / f"{name}.png")
        if path is not None:
            out[name] = path.name
        else:  # a plot of an earlier report of this run must not linger beside this one
            (folder / f"{name}.png").unlink(missing_ok=True)
    return out
