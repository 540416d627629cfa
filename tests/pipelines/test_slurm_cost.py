"""The cost line of a curation submission (``pipelines/slurm_cluster/cost.py``): a finished run's measured
per-document cost, and the CPU-hours it predicts for the submission's WARC bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.slurm import SlurmError
from pipelines.slurm_cluster.cost import BUNDLED, curation_cost, measured_cost

RECIPE = {"curate": {"extractor": "trafilatura"}}


def _finished_run(root: Path, warc_mb: float, documents: int, step_seconds: list[float]) -> Path:
    """A run directory as ``pipelines.run`` leaves it: run.json (recipe, inputs), stats.json (curate steps)."""
    (root / "in").mkdir(parents=True)
    (root / "in" / "a.warc.gz").write_bytes(b"\0" * int(warc_mb * 1e6))
    run = root / "run"
    run.mkdir()
    config = {"recipe": RECIPE, "source": {"base": str(root / "in"), "paths": ["a.warc.gz"]}}
    (run / "run.json").write_text(json.dumps({"config": config}))
    steps = [{"name": "READER", "in": None, "time_s": step_seconds[0]}]
    steps += [{"name": f"step{i}", "in": documents, "time_s": t} for i, t in enumerate(step_seconds[1:])]
    (run / "stats.json").write_text(json.dumps({"stages": {"curate": {"steps": steps}}}))
    return run


def test_a_finished_runs_cost_is_its_step_time_over_its_documents(tmp_path: Path) -> None:
    run = _finished_run(tmp_path, warc_mb=2.0, documents=400, step_seconds=[1.0, 6.0, 1.0])
    cost = measured_cost(str(run), RECIPE)
    assert cost.seconds_per_document == pytest.approx(8.0 / 400)
    assert cost.documents_per_mb == pytest.approx(200)
    warcs = [str(tmp_path / "in" / "a.warc.gz")] * 3 + ["https://data.commoncrawl.org/x.warc.gz"]
    planned = curation_cost(warcs, tasks=4, cpus_per_task=2, limit_s=3600, cost=cost)
    # 3 x 2 MB + one remote WARC counted as 1 GB; 200 documents per MB at 20 ms each
    assert planned.megabytes == pytest.approx(1006)
    assert planned.cpu_hours == pytest.approx(1006 * 200 * 0.02 / 3600)
    assert planned.reserved_cpu_hours == pytest.approx(8)
    line = planned.line(largest_task_s=2000)
    assert line.startswith("[slurm] cost: curate array of 4 task(s) x 2 CPU for 4 WARC file(s), 1,006.0 MB, ")
    assert "~201,200 documents x 20.0 ms = ~1.12 CPU-hours (per-document cost of the finished run" in line
    assert line.endswith("largest task ~0:33:20 of its --slurm-time 1:00:00, at most 8 CPU-hours reserved")


def test_the_bundled_figure_is_the_sample_runs() -> None:
    assert BUNDLED.seconds_per_mb == pytest.approx(6.17 / 1.14)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("recipe", "that run used another recipe"),
        ("no_stats", "not a finished run"),
        ("no_documents", "needs a run that read documents from local WARC files"),
    ],
)
def test_a_run_that_cannot_give_the_cost_is_one_line(tmp_path: Path, change: str, message: str) -> None:
    run = _finished_run(tmp_path, warc_mb=1.0, documents=0 if change == "no_documents" else 10, step_seconds=[1, 1])
    if change == "no_stats":
        (run / "stats.json").unlink()
    recipe = {"curate": {"extractor": "resiliparse"}} if change == "recipe" else RECIPE
    with pytest.raises(SlurmError, match=message):
        measured_cost(str(run), recipe)
