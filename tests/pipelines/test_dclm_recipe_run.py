"""The DCLM-style recipe end to end on the bundled sample: fastwarc reads, resiliparse extracts under the
extraction step's id, URL and exact dedup run before DCLM's BFF, and every count has its removed/ rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import REPO, run_cli

pytestmark = pytest.mark.e2e


def test_dclm_recipe_runs_the_sample(tmp_path: Path) -> None:
    recipe = REPO / "pipelines" / "recipes" / "dclm.yaml"
    run_cli("pipelines.run", "sample", "--out", str(tmp_path), "--recipe", str(recipe), "--workers", "2")
    run = tmp_path / "sample"
    config = json.loads((run / "run.json").read_text())["config"]["recipe"]
    assert (config["name"], config["reader"]["library"], config["extraction"]["extractor"]) == (
        "dclm",
        "fastwarc",
        "resiliparse",
    )
    stages = json.loads((run / "stats.json").read_text())["stages"]
    names = [s["name"] for s in stages["curate"]["steps"]]
    assert any("fastwarc" in n for n in names) and "pii" not in [s["id"] for s in stages["curate"]["steps"]]
    assert {"dedup_url_signatures", "dedup_exact_signatures", "dedup_bff", "dedup_filter"} <= set(stages)
    assert not any(name.startswith(("dedup_signatures", "dedup_buckets")) for name in stages)  # no MinHash
    report = json.loads((run / "report" / "report.json").read_text())
    steps = {s["step"]: s for s in report["steps"]}
    assert steps["extraction"]["in"] > steps["extraction"]["kept"] > 0
    for step in ("extraction", "url_dedup", "exact", "bff"):
        assert steps[step]["consistent"], step
    assert steps["exact"]["dropped"] > 0
    kept = sum(pq.ParquetFile(f).metadata.num_rows for f in (run / "deduped").glob("*.parquet"))
    assert kept == report["totals"]["kept_documents"] == steps["bff"]["kept"]
    bff = json.loads((run / "minhash" / "bff" / "clusters" / "summary.json").read_text())
    assert bff["documents"] == steps["bff"]["in"] and bff["filter_bytes"] > 0
