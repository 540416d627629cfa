"""What a curation submission will cost, printed before anything is submitted: the array size, the CPU-hours
the recipe's measured per-document cost predicts, and the CPU-hours the allocation may hold at most.

The per-document cost comes from a finished run of the recipe (``--cost-from RUN_DIR``: its ``stats.json``
step times over the documents its reader yielded, and its documents per MB of compressed WARC), or else
from the bundled figure below. The submission's documents are its WARC bytes times that density (a remote
WARC of unknown size counts as a Common Crawl file of ``REMOTE_WARC_BYTES``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from common.slurm import SlurmError, format_time

REMOTE_WARC_BYTES = 10**9  # a Common Crawl WARC file, when its size is not known without a request


@dataclass(frozen=True)
class DocumentCost:
    """CPU seconds per document of one recipe, and documents per MB of compressed WARC; where they come from."""

    seconds_per_document: float
    documents_per_mb: float
    measured_on: str

    @property
    def seconds_per_mb(self) -> float:
        return self.seconds_per_document * self.documents_per_mb


# The FineWeb recipe on the bundled sample (one task, one core): 6.17 s of step time for the 270 HTML pages of
# its 1.14 MB WARC, the URL blocklists' loading included (stats.json of `python -m pipelines.run sample`).
BUNDLED = DocumentCost(6.17 / 270, 270 / 1.14, "the FineWeb recipe on the bundled sample (bundled figure)")


def warc_bytes(paths: list[str]) -> list[int]:
    return [os.path.getsize(p) if os.path.exists(p) else REMOTE_WARC_BYTES for p in paths]


def largest_task_bytes(paths: list[str], tasks: int) -> int:
    """Compressed WARC bytes of the heaviest task (datatrove gives task r the files r, r + tasks, ...)."""
    sizes = warc_bytes(paths)
    return max((sum(sizes[r::tasks]) for r in range(tasks)), default=0)


def measured_cost(run_dir: str, recipe: dict) -> DocumentCost:
    """``--cost-from RUN_DIR``: a finished curation of the same recipe, its inputs local files."""
    root = Path(run_dir)
    try:
        run = json.loads((root / "run.json").read_text())
        stats = json.loads((root / "stats.json").read_text())
    except (OSError, ValueError):
        raise SlurmError(f"--cost-from {run_dir}: not a finished run (no readable run.json and stats.json)") from None
    if run.get("config", {}).get("recipe") != json.loads(json.dumps(recipe)):
        raise SlurmError(f"--cost-from {run_dir}: that run used another recipe; its cost would not be this one's")
    steps = stats.get("stages", {}).get("curate", {}).get("steps", [])
    documents = next((s["in"] for s in steps[1:] if s.get("in")), 0)  # what the reader yielded
    source = run["config"]["source"]
    paths = [os.path.join(source["base"], p) for p in source["paths"]]
    if not documents or not all(os.path.exists(p) for p in paths):
        raise SlurmError(f"--cost-from {run_dir}: needs a run that read documents from local WARC files")
    megabytes = sum(warc_bytes(paths)) / 1e6
    seconds = sum(s.get("time_s", 0.0) for s in steps)
    return DocumentCost(seconds / documents, documents / megabytes, f"the finished run {run_dir}")


@dataclass(frozen=True)
class CurationCost:
    """The curate array one submission makes, its predicted and its largest possible CPU-hours."""

    tasks: int
    cpus_per_task: int
    warc_files: int
    megabytes: float
    cost: DocumentCost
    limit_s: float  # --slurm-time

    @property
    def documents(self) -> float:
        return self.megabytes * self.cost.documents_per_mb

    @property
    def cpu_hours(self) -> float:
        return self.documents * self.cost.seconds_per_document / 3600

    @property
    def reserved_cpu_hours(self) -> float:
        """Every task held for its whole time limit: what the allocation may charge at most."""
        return self.tasks * self.cpus_per_task * self.limit_s / 3600

    def line(self, largest_task_s: float) -> str:
        return (
            f"[slurm] cost: curate array of {self.tasks} task(s) x {self.cpus_per_task} CPU for {self.warc_files} "
            f"WARC file(s), {self.megabytes:,.1f} MB, ~{self.documents:,.0f} documents x "
            f"{self.cost.seconds_per_document * 1000:.1f} ms = ~{self.cpu_hours:,.3g} CPU-hours (per-document cost "
            f"of {self.cost.measured_on}); largest task ~{format_time(largest_task_s)} of its --slurm-time "
            f"{format_time(self.limit_s)}, at most {self.reserved_cpu_hours:,.3g} CPU-hours reserved"
        )


def curation_cost(paths: list[str], tasks: int, cpus_per_task: int, limit_s: float, cost: DocumentCost) -> CurationCost:
    megabytes = sum(warc_bytes(paths)) / 1e6
    return CurationCost(tasks, cpus_per_task, len(paths), megabytes, cost, limit_s)
