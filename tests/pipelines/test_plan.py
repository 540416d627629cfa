"""``pipelines.plan``: the arithmetic from a recipe's costs to a dump's tasks, CPU, wall time, documents and cost;
its sources (published crawl, listing under --cc-base, counted local WARCs); its bad inputs (one line, exit 2).

The held-out check (prediction vs a measured run on WARCs the profile never saw) is ``bench.curate_profile``;
the e2e test here calibrates from a real run of the sample and predicts that run back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from common.config import ConfigError
from pipelines import plan as plan_cli
from pipelines.costs import Cluster, RecipeCosts, Workload, load_costs, plan
from pipelines.sample import SAMPLE_WARC
from tests.support.cli import REPO, run_cli

COSTS = RecipeCosts(
    recipe="toy", run_fixed_cpu_s=5.0, task_fixed_cpu_s=2.0, cpu_s_per_response={"curate": 0.01, "dedup": 0.002},
    kept_per_response=0.2, curated_per_response=0.25, tokens_per_kept_doc=800.0,
    bytes_per_response={"curated": 1000.0, "removed": 3000.0, "minhash": 100.0, "deduped": 900.0},
    warc_bytes_per_response=30_000.0, objects_per_task=10.0, pairs_per_curated_doc=0.1, peak_rss_mb=1500.0,
)


def test_the_arithmetic_scales_the_costs_to_the_workload() -> None:
    work = Workload("w", warcs=100, responses=1_000_000, how="given")
    result = plan(work, COSTS, Cluster(cpus=50, mem_per_cpu_gb=1.0, price_per_cpu_hour=0.1, node_cpus=4))
    curate, dedup = result.stages
    assert curate.cpu_s == pytest.approx(100 * 2.0 + 1_000_000 * 0.01)
    assert dedup.cpu_s == pytest.approx(1_000_000 * 0.002)
    assert result.cpu_s == pytest.approx(5 + 10_200 + 2_000)
    # 1.5 GB per task on 1 GB CPUs: each task holds 2 CPUs, so 25 slots, 4 waves of 102 s
    assert curate.wall_s == pytest.approx(4 * 10_200 / 100)
    assert result.kept_documents == pytest.approx(200_000) and result.kept_tokens == pytest.approx(160_000_000)
    assert result.cost == pytest.approx(result.cpu_s / 3600 * 0.1)
    assert result.storage_bytes["removed"] == pytest.approx(3e9)
    # a source-wide duplicate share replaces the profile's: curated x (1 - share)
    wide = plan(work, COSTS, Cluster(50, 1.0, 0.1, 4), dedup_removes=0.5)
    assert wide.kept_documents == pytest.approx(250_000 * 0.5)


def test_a_task_larger_than_a_node_or_a_cluster_cap_too_small_is_refused() -> None:
    work = Workload("w", 10, 10_000, "given")
    with pytest.raises(ConfigError, match="curate task needs 1.46 GB but a node holds 1 GB"):
        plan(work, COSTS, Cluster(cpus=8, mem_per_cpu_gb=0.5, price_per_cpu_hour=0.1, node_cpus=2))
    with pytest.raises(ConfigError, match="cluster memory cap 16 MB"):
        plan(work, COSTS, Cluster(8, 4.0, 0.1), cluster_memory_mb=16)


def test_every_shipped_recipe_has_measured_costs() -> None:
    for recipe in sorted((REPO / "pipelines" / "recipes").glob("*.yaml")):
        name = plan_cli.load_recipe(recipe).name
        costs = load_costs(name)
        assert costs.cpu_per_response() > 0 and 0 < costs.kept_per_response <= costs.curated_per_response <= 1
        assert costs.measured["by"] == "python -m bench.curate_profile"


def test_the_published_crawl_and_counted_local_warcs(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main(["CC-MAIN-2024-10", "--recipe", str(REPO / "pipelines/recipes/dclm.yaml"), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["workload"]["warcs"], figures["workload"]["responses"]) == (90_000, 3_160_000_000)
    assert figures["stages"][0]["tasks"] == 90_000 and figures["cpu_hours"] > 0 and figures["cost"] > 0
    assert plan_cli.main([str(SAMPLE_WARC), "--explain"]) == 0
    text = capsys.readouterr().out
    assert "280 response records counted in 1 file(s)" in text and "curate CPU = 1 tasks x" in text


def test_a_listing_under_cc_base_sets_the_warc_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "crawl-data" / "CC-MAIN-2024-18" / "warc.paths.gz"
    listing.parent.mkdir(parents=True)
    listing.write_bytes(gzip.compress(b"".join(b"crawl-data/x/%d.warc.gz\n" % i for i in range(3))))
    assert plan_cli.main(["cc-2024-18", "--cc-base", str(tmp_path), "--pages-per-warc", "1000", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["workload"]["warcs"], figures["workload"]["responses"]) == (3, 3000)


def _recipe_without_costs(tmp_path: Path) -> str:
    path = tmp_path / "new.yaml"
    path.write_text("name: never_measured\n")
    return str(path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["CC-MAIN-1999-01"], "unknown crawl CC-MAIN-1999-01"),
        (["CC-MAIN-2024-10", "--recipe", "RECIPE"], "recipe 'never_measured' has no measured costs"),
        (["CC-MAIN-2024-10", "--mem-per-cpu", "0.05", "--node-cpus", "2"], "but a node holds 0.1 GB"),
        (["CC-MAIN-2024-10", "--cluster-memory", "20"], "--cluster-memory: cluster memory cap 20 MB"),
        (["CC-MAIN-2024-10", "--cpus", "0"], "--cpus must be >= 1"),
        (["CC-MAIN-2024-10", "--price", "nan"], "--price must be >= 0"),
        (["CC-MAIN-2024-10", "--dedup-removes", "1.5"], "--dedup-removes must be a fraction"),
        (["no/such/file.warc.gz"], "input not found"),
        (["sample", "--calibrate", "no/such/run"], "not a finished run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _recipe_without_costs(tmp_path)
    argv = [recipe if a == "RECIPE" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        plan_cli.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1
    assert {p.name for p in tmp_path.iterdir()} == {"new.yaml"}  # nothing written


@pytest.mark.e2e
def test_calibrating_from_a_run_predicts_that_run(tmp_path: Path) -> None:
    """A local run records its CPU (cpu.json); calibrated from it, the plan for the same WARC gives back the run's
    CPU seconds and kept documents (the table's fixed costs plus the run's own per-page figures)."""
    recipe = str(REPO / "pipelines" / "recipes" / "dclm.yaml")
    run_cli("pipelines.run", "sample", "--out", str(tmp_path), "--recipe", recipe, "--workers", "1")
    run = tmp_path / "sample"
    spent = json.loads((run / "cpu.json").read_text())
    assert {"curate", "dedup_filter", "process"} <= set(spent) and spent["process"] > spent["curate"] > 0
    out = run_cli("pipelines.plan", "sample", "--recipe", recipe, "--calibrate", str(run), "--json").stdout
    figures = json.loads(out)
    report = json.loads((run / "report" / "report.json").read_text())
    assert figures["kept_documents"] == pytest.approx(report["totals"]["kept_documents"])
    assert figures["kept_tokens"] == pytest.approx(report["totals"]["kept_tokens"])
    costs = load_costs("dclm")
    floor = costs.run_fixed_cpu_s + costs.task_fixed_cpu_s
    assert figures["cpu_s"] == pytest.approx(max(spent["process"], floor), rel=1e-6)
    assert figures["costs"]["measured"]["calibrated_from"] == str(run)
