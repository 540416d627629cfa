"""``pipelines.plan``: the arithmetic from a recipe's costs to a dump's tasks, CPU, wall time, documents and cost;
its sources (published crawl, listing under --cc-base, counted local WARCs); its bad inputs (one line, exit 2).

The held-out check (prediction vs a measured run on WARCs the profile never saw) is ``bench.curate_profile``;
the e2e test here calibrates from a real run of the sample and predicts that run back."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from common.config import ConfigError
from dedup.bff import FilterSize
from dedup.config import DedupConfig
from pipelines import plan as plan_cli
from pipelines.costs import Cluster, RecipeCosts, Workload, load_costs, plan
from pipelines.sample import SAMPLE_WARC
from tests.support.cli import REPO, run_cli

DCLM = str(REPO / "pipelines" / "recipes" / "dclm.yaml")
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


def test_a_bff_recipe_plans_its_one_decision_task_and_its_filter() -> None:
    """BFF's decision task is one (the filter is order-dependent): its CPU is its wall time, its memory the run's
    peak plus the filter the n-gram estimate sizes (DCLM's formula), and no node holding it is one line."""
    costs = replace(COSTS, bff_fixed_cpu_s=3.0, bff_cpu_s_per_ngram=2e-6, bff_ngrams_per_curated_doc=1000.0)
    work, bff = Workload("w", warcs=100, responses=1_000_000, how="given"), DedupConfig(method="bff")
    result = plan(work, costs, Cluster(cpus=50, mem_per_cpu_gb=1.0, price_per_cpu_hour=0.1, node_cpus=4), dedup=bff)
    assert [s.name for s in result.stages] == ["curate", "dedup", "bff"]
    stage = result.stages[-1]
    ngrams = 250_000 * 1000  # curated documents x n-grams each
    assert stage.tasks == 1 and stage.cpu_s == pytest.approx(3.0 + ngrams * 2e-6) and stage.wall_s == stage.cpu_s
    filter_bytes = FilterSize.for_rate(ngrams, 0.01).size_bytes  # ~9.6 bits per n-gram: 286 MiB
    assert stage.memory_mb_per_task == pytest.approx(1500 + filter_bytes / 2**20)
    assert any("BFF filter: 285.9 MiB" in line for line in stage.arithmetic)
    assert result.cpu_s == pytest.approx(5 + 10_200 + 2_000 + stage.cpu_s)
    assert result.wall_s == pytest.approx(sum(s.wall_s for s in result.stages))  # the serial task adds its CPU
    sized = plan(work, costs, Cluster(50, 1.0, 0.1, 4), dedup=replace(bff, bff_expected_ngrams=10**6))  # the recipe's
    fixed = FilterSize.for_rate(10**6, 0.01).size_bytes
    assert sized.stages[-1].memory_mb_per_task == pytest.approx(1500 + fixed / 2**20)
    with pytest.raises(ConfigError, match="a bff task needs 1.74 GB but a node holds 1.6 GB"):  # curate's 1.46 fit
        plan(work, costs, Cluster(cpus=8, mem_per_cpu_gb=0.8, price_per_cpu_hour=0.1, node_cpus=2), dedup=bff)
    with pytest.raises(ConfigError, match="dedups with BFF but its costs have no BFF figures"):
        plan(work, COSTS, Cluster(50, 1.0, 0.1, 4), dedup=bff)


def test_every_shipped_recipe_has_measured_costs() -> None:
    for recipe in sorted((REPO / "pipelines" / "recipes").glob("*.yaml")):
        name = plan_cli.load_recipe(recipe).name
        costs = load_costs(name)
        assert costs.cpu_per_response() > 0 and 0 < costs.kept_per_response <= costs.curated_per_response <= 1
        assert costs.measured["by"] == "python -m bench.curate_profile"


def test_the_published_crawl_and_counted_local_warcs(capsys: pytest.CaptureFixture[str]) -> None:
    node = ["--node-cpus", "128", "--mem-per-cpu", "16"]  # 2 TB: BFF's filter for a whole dump is ~1.9 TB
    assert plan_cli.main(["CC-MAIN-2024-10", "--recipe", DCLM, *node, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["workload"]["warcs"], figures["workload"]["responses"]) == (90_000, 3_160_000_000)
    assert figures["stages"][0]["tasks"] == 90_000 and figures["cpu_hours"] > 0 and figures["cost"] > 0
    bff = figures["stages"][-1]
    assert bff["name"] == "bff" and bff["tasks"] == 1 and bff["memory_mb_per_task"] > 1000 * 1024
    assert any(line.startswith("bff memory = ") and "BFF filter: " in line for line in bff["arithmetic"])
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
        (["CC-MAIN-2024-10", "--cpus", "0"], "argument --cpus: '0' is outside the allowed range [1, 16777216]"),
        (["CC-MAIN-2024-10", "--cpus", str(2**64)], "argument --cpus: '18446744073709551616' is outside"),
        (["CC-MAIN-2024-10", "--mem-per-cpu", "1e30"], "argument --mem-per-cpu: '1e30' is outside the allowed range"),
        (["CC-MAIN-2024-10", "--recipe", DCLM], "a bff task needs"),  # its filter on a default 64 GB node
        (["CC-MAIN-2024-10", "--price", "nan"], "argument --price: 'nan' is outside the allowed range [0, 1000]"),
        (["CC-MAIN-2024-10", "--dedup-removes", "1.5"], "argument --dedup-removes: '1.5' is outside"),
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
    recipe = DCLM
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
    # the run's CPU back: the table's fixed parts, what is left of the run's own CPU beside them and BFF's task,
    # and BFF's task as measured (never below its table's fixed part: on a busy machine either side may win)
    fixed = costs.run_fixed_cpu_s + costs.task_fixed_cpu_s
    bff_spent = spent["dedup_bff"]
    expected = fixed + max(0.0, spent["process"] - fixed - bff_spent) + max(costs.bff_fixed_cpu_s, bff_spent)
    assert figures["cpu_s"] == pytest.approx(expected, rel=1e-6)
    if spent["process"] >= fixed + bff_spent and bff_spent >= costs.bff_fixed_cpu_s:
        assert figures["cpu_s"] == pytest.approx(spent["process"], rel=1e-6)
    assert figures["costs"]["measured"]["calibrated_from"] == str(run)
    # the recipe dedups with BFF: its one decision task, with the filter this run allocated (its n-gram estimate)
    bff = figures["stages"][-1]
    summary = json.loads((run / "minhash" / "bff" / "clusters" / "summary.json").read_text())
    assert bff["name"] == "bff" and bff["tasks"] == 1 and bff["wall_s"] == bff["cpu_s"]
    assert (bff["memory_mb_per_task"] - costs.peak_rss_mb) * 2**20 == pytest.approx(summary["filter_bytes"], rel=1e-9)
