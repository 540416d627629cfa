"""Compare a run directory written to a store with a local one: the documents, removed documents and stats
that must be equal wherever the run wrote, and the files a run left on the node (``files_under``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from pipelines.sample import SAMPLE_WARC

DOCUMENT_FOLDERS = ("curated", "deduped", "removed")
LOAD_DEPENDENT = ("timeout", "broken_process")  # verdicts of the sandboxes' time limit (extraction, signals)


def files_under(root: Path) -> dict[str, int]:
    """Every file below ``root`` (links not followed) -> its modification time in ns."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not Path(folder, d).is_symlink()]
        for name in names:
            path = Path(folder, name)
            out[str(path)] = path.lstat().st_mtime_ns
    return out


def documents(root: str, folder: str, skip: frozenset[str] = frozenset()) -> dict[str, list[dict]]:
    """``{relative file: rows}`` of every parquet file under ``root/folder`` (local or URL), rows of ``skip`` ids
    left out."""
    fs, base = fsspec.core.url_to_fs(f"{root}/{folder}")
    out = {}
    for path in sorted(fs.glob(f"{base}/**/*.parquet")):
        with fs.open(path, "rb") as f:
            rows = [row for row in pq.read_table(f).to_pylist() if row["id"] not in skip]
        if rows or not skip:  # a file that held only skipped documents exists in one run only
            out[path[len(base) :]] = rows
    return out


def timed_out(root: str) -> frozenset[str]:
    """Documents a step's time limit removed (extraction, signals): a verdict of the machine's load, not of
    the storage."""
    rows = documents(root, "removed")
    return frozenset(row["id"] for part in rows.values() for row in part if row["filter_reason"] in LOAD_DEPENDENT)


def every_document_once(root: str) -> list[str]:
    """The ids of the curation's verdicts, kept (``curated/``) or removed with a reason (``removed/``, but not the
    near-duplicates: those are curated documents too), sorted: each document read once."""
    rows = {**documents(root, "curated"), **{f"removed{name}": part for name, part in documents(root, "removed").items()
                                             if not name.startswith("/minhash/")}}  # fmt: skip
    return sorted(row["id"] for part in rows.values() for row in part)


def sample_order() -> list[str]:
    """The bundled sample's record ids in the WARC's order (the order its one curate task reads them)."""
    with SAMPLE_WARC.open("rb") as stream:
        return [record.rec_headers.get_header("WARC-Record-ID") for record in ArchiveIterator(stream)]


def from_first(ids: frozenset[str], order: list[str]) -> frozenset[str]:
    """``ids`` and every document after the first of them in ``order``: a page that hits the extraction's time
    limit restarts the extraction's process, and with it trafilatura's cache of text already seen, so the pages
    after it in the same task may be extracted differently."""
    first = min((order.index(doc_id) for doc_id in ids if doc_id in order), default=len(order))
    return ids | frozenset(order[first:])


def assert_same_run(run: str, local: Path, folders: tuple[str, ...] = DOCUMENT_FOLDERS) -> None:
    """Documents, removed documents (ids, text, reasons, every column) and stats of ``run`` (a store URL or a
    folder) as the local run's of the same input; a document that hit a step's time limit in either run (a
    loaded machine) is left out of both, with the documents after it in the bundled sample's order
    (``from_first``), and then the stats are not compared. ``folders``: the document folders the runs wrote
    (no ``deduped`` for ``--no-dedup``)."""
    timeouts = timed_out(run) | timed_out(str(local))
    assert len(timeouts) <= 3, f"{len(timeouts)} timeouts: the machine is too loaded to compare"
    unstable = from_first(timeouts, sample_order()) if timeouts else frozenset()
    assert every_document_once(run) == every_document_once(str(local))  # whatever the load: none lost or doubled
    assert documents(run, "curated", unstable), f"{run}: no curated documents"
    for folder in folders:
        ours, theirs = documents(run, folder, unstable), documents(str(local), folder, unstable)
        assert not differences(ours, theirs), (folder, differences(ours, theirs))
    fs, path = fsspec.core.url_to_fs(f"{run}/stats.json")
    if not unstable:
        ours = stats_without_times(fs.cat(path).decode())
        assert ours == stats_without_times((local / "stats.json").read_text())


def differences(ours: dict[str, list[dict]], theirs: dict[str, list[dict]], limit: int = 8) -> list[str]:
    """``file: row N: column (ours, theirs)`` for the first differing cells (files missing on either side too)."""
    out = [f"{name}: only on one side" for name in sorted(set(ours) ^ set(theirs))]
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        if len(a) != len(b):
            out.append(f"{name}: {len(a)} rows != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            out += [f"{name}: row {i}: {k} ({x[k]!r:.60} != {y.get(k)!r:.60})" for k in x if x[k] != y.get(k)]
    return out[:limit]


def stats_without_times(text: str) -> dict:
    stats = json.loads(text)
    for stage in stats["stages"].values():
        for step in stage["steps"]:
            step.pop("time_s")
    return stats


@pytest.fixture(scope="session")
def local_sample(sample_run: Path) -> Path:
    """``python -m pipelines.run sample --workers 2`` to a local folder (the command the store runs repeat): its
    run directory. The session's quickstart run (``sample_run``) is that command plus ``--train``, whose chain
    adds its own folders and leaves ``curated/``, ``deduped/``, ``removed/`` and ``stats.json`` as they were:
    one sample run fewer per session."""
    return sample_run
