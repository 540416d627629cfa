"""The shape of a finished run: its steps (from ``stats.json``) and the document sets on disk.

A step's name is its id and ``removed/<id>/`` holds what it dropped, so the report and the
inspector pair folders with ``stats.json`` steps by that id alone. Counts always come from ``stats.json``; the
parquet files are only read for what stats cannot say (tokens, lengths, languages, samples).
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from common.bounded_input import MAX_DATA_BYTES, read_json_bounded
from common.documents import open_parquet
from common.run_dir import CURATED, PREVIOUSLY, kept_documents_dir
from common.storage import as_path, files_by_folder, filesystem, is_remote, keys_under
from dedup.pipeline import DedupLayout
from filters.decontamination import REASON as CONTAMINATED
from pipelines.layout import RunLayout

# stages whose output is documents, in run order; the other dedup_* stages only compute signatures,
# buckets and clusters (a filter there only pre-filters signature input, it removes nothing)
STAGE_ORDER = ("curate", "dedup_filter")
# the reason of a dropped document with no filter_reason (older dedup filters wrote none), by removed/ folder
DEFAULT_REASON = {k: f"{k}_duplicate" for k in ("minhash", "exact", "cross_dump", "bff")} | {
    "url_dedup": "url_duplicate"
}
# removed/ folders written by a step of another id: the MinHash filter also drops cross-dump duplicates
FOLDER_STEP = {"cross_dump": "minhash"}
NEWLY = ("dropped", "kept")  # what a refilter changed against its run's curation


def dedup_step_id(kind: str) -> str:
    """A dedup filter's id is its kind; the report names it by its removed/ folder (``url`` -> ``url_dedup``,
    since ``url`` is the curate stage's URL filter)."""
    return Path(DedupLayout("").removed(kind)).name


def contamination_reasons(reasons: dict[str, int], counters: dict) -> dict[str, int]:
    """Decontamination's drops per eval set (``contaminated[wiki]``), from its ``contaminated_<set>`` counters."""
    if CONTAMINATED not in reasons:
        return reasons
    prefix = f"{CONTAMINATED}_"
    per_set = {f"{CONTAMINATED}[{k[len(prefix) :]}]": int(v) for k, v in counters.items() if k.startswith(prefix)}
    if sum(per_set.values()) != reasons[CONTAMINATED]:
        return reasons
    return {**{k: v for k, v in reasons.items() if k != CONTAMINATED}, **per_set}


@dataclass
class Step:
    """One filtering step of ``stats.json``: documents in, kept and dropped, by reason."""

    stage: str
    name: str  # the step id: its removed/<id>/ folder
    n_in: int
    kept: int
    dropped: int
    reasons: dict[str, int]
    removed_dirs: list[str] = field(default_factory=list)

    @property
    def unexplained(self) -> int:
        """Drops that no reason accounts for (the dedup filter records none)."""
        return max(self.dropped - sum(self.reasons.values()), 0)


@dataclass
class DocSet:
    """Parquet files of one kind of document: the kept ones, or those one step removed."""

    key: str  # "kept" or the removed/ dir(s) of a step, e.g. "gopher_quality"
    label: str
    files: list[Path]
    step: int | None = None  # index into RunInfo.steps; None for kept or an unknown dir
    default_reason: str | None = None

    @classmethod
    def kept(cls, folder: Path) -> DocSet:
        return cls("kept", f"kept ({folder.name}/)", sorted(_parquet_in(folder)))


def _parquet_in(folder: Path) -> list[Path]:
    """The ``*.parquet`` files directly in ``folder``; on a store by one listing (a glob there was a HEAD and three
    listings, one after another)."""
    if not is_remote(folder):
        return list(folder.glob("*.parquet"))
    fs, inner = filesystem(folder)
    inner = inner.rstrip("/")
    names = [key[len(inner) + 1 :] for key in keys_under(fs, inner)]
    return [folder / name for name in names if "/" not in name and fnmatch(name, "*.parquet")]


@dataclass
class RunInfo:
    """A run directory read for reporting: metadata, stats, steps in pipeline order, document sets."""

    root: Path
    meta: dict
    stats: dict
    steps: list[Step]
    kept: DocSet
    removed: list[DocSet]


def _document_stages(stats: dict) -> list[str]:
    stages = list(stats.get("stages", {}))
    known = [s for s in STAGE_ORDER if s in stages]
    return known + [s for s in stages if s not in known and not s.startswith("dedup_")]


def filtering_steps(stats: dict) -> list[Step]:
    """Steps with documents in and kept (filters, extraction, dedup filter), in pipeline order."""
    steps = []
    for stage in _document_stages(stats):
        for raw in stats["stages"][stage].get("steps", []):
            if raw.get("in") is None or raw.get("kept") is None:
                continue
            name = dedup_step_id(raw["id"]) if stage == "dedup_filter" else raw["id"]
            reasons = {k: int(v) for k, v in (raw.get("dropped_by_reason") or {}).items()}
            reasons = contamination_reasons(reasons, raw.get("counters") or {})
            steps.append(Step(stage, name, int(raw["in"]), int(raw["kept"]), int(raw.get("dropped") or 0), reasons))
    return steps


def reader_counters(stats: dict) -> dict[str, int]:
    """The WARC reader's counters (records read, skipped by type, damage found)."""
    for raw in stats.get("stages", {}).get("curate", {}).get("steps", []):
        if raw.get("in") is None and "records" in (raw.get("counters") or {}):
            return {k: int(v) for k, v in raw["counters"].items()}
    return {}


def reason_kind(reason: str) -> str:
    """A reason without its detail: ``contaminated[wiki]: <n-gram>`` -> ``contaminated[wiki]``."""
    return reason.split(": ", 1)[0]


def disk_reasons(docset: DocSet) -> Counter:
    """``filter_reason`` counts of a set's files, by kind (only that column is read)."""
    counts: Counter = Counter()
    for path in docset.files:
        pf = open_parquet(path)
        if "filter_reason" in pf.schema_arrow.names:
            values = pf.read(columns=["filter_reason"]).column(0).to_pylist()
            counts.update(reason_kind(v) if v else docset.default_reason or "(none)" for v in values)
        else:
            counts[docset.default_reason or "(none)"] += pf.metadata.num_rows
    return counts


def _removed_files(root: Path) -> dict[str, list[Path]]:
    """The parquet files of each folder of ``removed/``, by folder name. On a store one listing of the tree
    (an existence test, a listing, a folder test and a glob per folder were ~25 round trips one after
    another: 0.8 s at 30 ms a request, ``bench.object_store --latency-ms 30``); a store has no empty folders."""
    if is_remote(root):
        grouped = files_by_folder(root)
        return {d: [root / f for f in files if f.endswith(".parquet")] for d, files in sorted(grouped.items())}
    dirs = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    return {name: sorted((root / name).glob("*.parquet")) for name in dirs}


def _removed_sets(layout: RunLayout, steps: list[Step]) -> list[DocSet]:
    ids = [s.name for s in steps]
    sets = []
    for name, files in _removed_files(layout.removed_root).items():
        owner = FOLDER_STEP.get(name, name)
        index = ids.index(owner) if owner in ids else None
        if index is not None:
            steps[index].removed_dirs.append(name)
        sets.append(DocSet(name, name, files, index, DEFAULT_REASON.get(name)))
    return sorted(sets, key=lambda s: (s.step if s.step is not None else len(steps), s.key))


def newly(run: RunInfo, which: str) -> tuple[list[DocSet], Callable[[dict], bool]]:
    """A refilter output's documents that moved against its run: ``dropped`` (the run had kept them) or
    ``kept`` (the run had removed them); the sets to read and the test of a row."""
    if which == "kept":
        return [run.kept], lambda row: row.get(PREVIOUSLY) not in (None, CURATED)
    return list(run.removed), lambda row: row.get(PREVIOUSLY) == CURATED


MISSING_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # what Path.exists takes for no file


class RunUnreadable(FileNotFoundError):
    """A run directory whose record (stats.json, run.json) is not the JSON object a run writes: for the
    CLIs, a folder that is not a run, with the reason in one line (not a traceback)."""


def _json_object(path: Path, missing_ok: bool = False) -> dict | None:
    """The JSON object in `path` (a FIFO or an oversized file refused, not read); else RunUnreadable. With
    ``missing_ok``, None when there is no such file, as ``Path.exists`` tells it: the open answers that (on a
    store ``exists`` was a HEAD and a listing, one after another, before the open)."""
    try:
        value = read_json_bounded(path, MAX_DATA_BYTES)
    except (OSError, ValueError) as err:
        if missing_ok and (isinstance(err, FileNotFoundError) or getattr(err, "errno", None) in MISSING_ERRNOS):
            return None
        raise RunUnreadable(f"{path}: not a record of a run ({err})") from None
    if not isinstance(value, dict):
        raise RunUnreadable(f"{path}: not a record of a run (a JSON {type(value).__name__}, not an object)")
    return value


def load_run(run_dir: Path, written: Mapping[str, dict] | None = None) -> RunInfo:
    """Read ``run.json``, ``stats.json`` and the file lists of a run directory. ``written``: those of the two
    records that the caller itself just wrote, by name, as a reader parses them (the run's driver: on a store each
    read back was a HEAD and a GET, one after another, while the report waited)."""
    layout = RunLayout(as_path(run_dir))
    written = written or {}
    stats = written.get("stats.json") or _json_object(layout.stats_json, missing_ok=True)
    if stats is None:
        raise FileNotFoundError(f"{layout.stats_json} not found: not a finished run directory")
    meta = written.get("run.json") or _json_object(layout.run_json, missing_ok=True)
    if meta is None:
        meta = _json_object(layout.refilter_json, missing_ok=True) or {}
    steps = filtering_steps(stats)
    kept = DocSet.kept(kept_documents_dir(layout.root) or layout.curated)
    return RunInfo(layout.root, meta, stats, steps, kept, _removed_sets(layout, steps))


def resolve_run_dir(path: Path) -> Path:
    """A run directory, or a ``--out`` folder holding exactly one (``OUT`` -> ``OUT/<DUMP>``)."""
    path = as_path(path)
    if (path / "stats.json").exists():
        return path
    runs = sorted(path.glob("*/stats.json")) if path.is_dir() else []
    if len(runs) == 1:
        return runs[0].parent
    if runs:
        names = ", ".join(p.parent.name for p in runs)
        raise FileNotFoundError(f"{path} holds several runs ({names}); name one")
    raise FileNotFoundError(f"{path} is not a run directory (no stats.json)")
