"""The run directory of DESIGN.md, and the view of it each stage's executor logs into.

``out/<DUMP>/``: ``run.json``, ``curated/``, ``removed/<step>/``, ``minhash/``, ``deduped/``,
``stats/``, ``logs/``, ``completions/``, ``report/``. datatrove's executors write
``completions/NNNNN``, ``stats/NNNNN.json``, ``logs/task_NNNNN.log`` and ``stats.json`` under their
logging folder; ``StageFolder`` maps those to ``completions/<stage>/...``, ``stats/<stage>/...`` and
``logs/<stage>/...`` so several stages share one run directory without clobbering each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datatrove.io import DataFolder

from common.storage import is_remote

MAPPED_TOPS = ("completions", "stats", "logs")


class StageFolder(DataFolder):
    """A ``DataFolder`` on the run directory that files one stage's executor output by stage name."""

    def __init__(self, path: str, stage: str, **kwargs):
        super().__init__(path, **kwargs)
        self.stage = stage

    def _map(self, path: str) -> str:
        path = path.strip("/")
        top, _, rest = path.partition("/")
        if top in MAPPED_TOPS:
            return f"{top}/{self.stage}/{rest}" if rest else f"{top}/{self.stage}"
        if path == "stats.json":
            return f"stats/{self.stage}.json"
        return f"logs/{self.stage}/{path}"

    def _unmap(self, path: str) -> str:
        for top in MAPPED_TOPS:
            prefix = f"{top}/{self.stage}"
            if path == prefix or path.startswith(prefix + "/"):
                return top + path[len(prefix) :]
        return path

    def _join(self, path):
        return super()._join(self._map(path)) if isinstance(path, str) else [self._join(p) for p in path]

    def _relpath(self, path):
        rel = super()._relpath(path)
        return self._unmap(rel) if isinstance(rel, str) else [self._unmap(p) for p in rel]


def _child(name: str) -> property:
    """A read-only path attribute: ``root / name``."""
    return property(lambda self: self.root / name, doc=f"``root/{name}``")


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run directory (one per source/dump)."""

    root: Path
    run_json = _child("run.json")
    curated = _child("curated")
    removed_root = _child("removed")
    deduped = _child("deduped")
    stats_json = _child("stats.json")
    refilter_json = _child("refilter.json")  # a refilter output's record (pipelines.refilter), in place of run.json

    def removed(self, step: str) -> Path:
        return self.root / "removed" / step

    def stage_folder(self, stage: str) -> StageFolder:
        if not is_remote(self.root):  # an object store has no folders to make
            self.root.mkdir(parents=True, exist_ok=True)
        return StageFolder(str(self.root), stage)
