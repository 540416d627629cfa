"""Run our curate stage and datatrove's reference pipeline on the same WARC files, in-process,
and compare their keep/drop decisions (the parity test and ``bench/curate.py`` use this)."""

from __future__ import annotations

import dataclasses
import resource
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.extractors.base import BaseExtractor
from datatrove.pipeline.readers import WarcReader

from curate.config import CurateConfig
from curate.extract import MainTextExtractor
from curate.pipeline import build_curate_pipeline
from pipelines.layout import RunLayout
from pipelines.recipe import load_recipe
from pipelines.sources import ResolvedSource, resolve_paths
from tests.support.datatrove_reference import reference_steps


@dataclass
class Decisions:
    """Which documents a pipeline read and kept, why it dropped the others, and how long it took."""

    seen: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process and its reaped children (the extraction sandbox)
    extraction_seconds: float = 0.0  # inside the extraction step (its wait for the sandbox child included)


def _extraction_seconds(steps: list[PipelineStep]) -> float:
    """Seconds the extraction steps (datatrove's or ours) have spent so far, by their time stats."""
    return sum(step.stats.time_stats.total for step in steps if isinstance(step, (BaseExtractor, MainTextExtractor)))


def cpu_clock() -> float:
    """CPU seconds of this process plus its terminated children.

    Extraction runs in a sandbox child that each pipeline reaps when its step ends, so the
    difference of two readings around a run is that run's CPU time on every core it used: a
    per-core throughput that other jobs on a shared machine do not distort as they do wall time.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_steps(steps: list[PipelineStep]) -> Iterable:
    data = None
    for step in steps:
        data = step(data, rank=0, world_size=1)
    return data


def _paths_file(files: list[Path], folder: Path) -> tuple[ResolvedSource, Path]:
    """The files as a source (common base + relative paths) and the listing the readers take."""
    source = resolve_paths([str(f) for f in files], dump="compare")
    listing = folder / "inputs.txt"
    listing.write_text("\n".join(source.paths) + "\n")
    return source, listing


def reference_decisions(files: list[Path], timeout: float = 1.0, warmup: list[Path] | None = None) -> Decisions:
    """datatrove's examples/fineweb.py steps over ``files``.

    ``warmup``: files run through the same step objects first, untimed, so the timing excludes the
    one-time loading (blocklists, spaCy, fastText) that a long task pays once.
    """
    out = Decisions()
    steps = reference_steps(timeout)
    with tempfile.TemporaryDirectory() as tmp:

        def tee(data):
            for doc in data:
                out.seen.add(doc.id)
                yield doc

        def run(paths: list[Path], folder: Path) -> set[str]:
            folder.mkdir()
            source, listing = _paths_file(paths, folder)
            data = tee(WarcReader(source.base, paths_file=str(listing))(None, rank=0, world_size=1))
            for step in steps:
                data = step(data, rank=0, world_size=1)
            return {doc.id for doc in data}

        if warmup:
            run(warmup, Path(tmp) / "warmup")
            out.seen.clear()
        extracting = _extraction_seconds(steps)
        start, cpu = time.perf_counter(), cpu_clock()
        out.kept = run(files, Path(tmp) / "run")
        out.seconds, out.cpu_seconds = time.perf_counter() - start, cpu_clock() - cpu
        out.extraction_seconds = _extraction_seconds(steps) - extracting
    return out


def curate_decisions(
    files: list[Path],
    config: CurateConfig | None = None,
    timeout: float | None = None,
    warmup: list[Path] | None = None,
) -> Decisions:
    """Our curate stage over ``files`` (writers included, as in production); ``warmup`` as above."""
    config = config or load_recipe().curate
    if timeout is not None:
        config = dataclasses.replace(config, extraction=dataclasses.replace(config.extraction, timeout=timeout))
    out = Decisions()
    with tempfile.TemporaryDirectory() as tmp:
        layout = RunLayout(Path(tmp) / "run")
        source, listing = _paths_file(files, Path(tmp))
        steps = build_curate_pipeline(
            config, source.base, str(listing), "compare", str(layout.curated), str(layout.removed_root)
        )
        if warmup:
            (Path(tmp) / "warmup").mkdir()
            warm, warm_listing = _paths_file(warmup, Path(tmp) / "warmup")
            steps[0] = type(steps[0])(warm.base, paths_file=str(warm_listing), dump="compare")
            for _ in run_steps(steps):
                pass
            shutil.rmtree(layout.root)
            steps[0] = type(steps[0])(source.base, paths_file=str(listing), dump="compare")
        extracting = _extraction_seconds(steps)
        start, cpu = time.perf_counter(), cpu_clock()
        for _ in run_steps(steps):
            pass
        out.seconds, out.cpu_seconds = time.perf_counter() - start, cpu_clock() - cpu
        out.extraction_seconds = _extraction_seconds(steps) - extracting
        for file in layout.curated.glob("*.parquet"):
            ids = pq.read_table(file, columns=["id"]).column("id").to_pylist()
            out.kept.update(ids)
        out.seen.update(out.kept)
        for file in layout.removed_root.rglob("*.parquet"):
            for row in pq.read_table(file, columns=["id", "filter_reason"]).to_pylist():
                out.seen.add(row["id"])
                out.reasons[row["id"]] = f"{file.parent.name}/{row['filter_reason']}"
    return out


def disagreements(ours: Decisions, reference: Decisions) -> list[tuple[str, str, str]]:
    """``(id, who kept it, our reason)`` for every document the two pipelines decided differently."""
    rows = []
    for doc_id in sorted(ours.seen | reference.seen):
        if (doc_id in ours.kept) != (doc_id in reference.kept):
            who = "ours" if doc_id in ours.kept else "reference"
            rows.append(
                (doc_id, who, ours.reasons.get(doc_id, "not read" if doc_id not in ours.seen else ""))
            )
    return rows
