"""``python -m pipelines.run``: outputs in the run layout, resume, clear errors, crawl ids."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.warc import iter_warc_records
from filters.quality import signal_columns
from pipelines.sample import SAMPLE_WARC
from tests.support.cli import REPO, run_cli
from tests.support.mirror import write_mirror

pytestmark = pytest.mark.e2e


def _ids(folder: Path) -> list[str]:
    ids: list[str] = []
    for file in sorted(folder.glob("*.parquet")):
        ids.extend(pq.read_table(file, columns=["id"]).column("id").to_pylist())
    return ids


def _sample_kinds() -> dict[str, str]:
    """URL -> the kind of page the sample generator wrote (from its metadata records)."""
    kinds = {}
    with open(SAMPLE_WARC, "rb") as f:
        for record in iter_warc_records(f):
            if record.rec_type == "metadata":
                fields = dict(
                    line.split(": ", 1) for line in record.content_stream().read().decode().splitlines() if ": " in line
                )
                kinds[record.rec_headers.get("WARC-Target-URI")] = fields.get("sample-kind", "")
    return kinds


def test_sample_run_writes_the_run_layout(sample_run: Path) -> None:
    for name in ("run.json", "stats.json", "curated", "removed", "stats", "logs", "completions"):
        assert (sample_run / name).exists(), name
    curated = sorted(sample_run.glob("curated/*.parquet"))
    assert curated and not list((sample_run / "curated").glob(".tmp/*"))
    meta = pq.ParquetFile(curated[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    table = pq.read_table(curated[0])
    for column in ("text", "id", "url", "dump", "date", "language", "language_score", *signal_columns()):
        assert column in table.column_names, column
    rows = table.to_pylist()
    assert all(r["dump"] == "sample" and r["language"] == "en" and r["language_score"] > 0.65 for r in rows)
    assert len(set(r["id"] for r in rows)) == len(rows)
    stdout = (sample_run / "cli-stdout.txt").read_text()
    for what in ("curated documents:", "removed documents:", "stats:"):
        assert what in stdout


def test_the_chain_ends_in_a_trained_model(sample_run: Path) -> None:
    """Sample crawl -> curated -> deduped -> tokenizer -> one-epoch mixture -> tiny model, end to end."""
    from mixtures.manifest import read_manifest

    stdout = (sample_run / "cli-stdout.txt").read_text()
    assert "training loss:" in stdout and "Hugging Face checkpoint:" in stdout
    manifest = read_manifest(sample_run / "mixture", verify=True)
    deduped = sum(pq.read_metadata(f).num_rows for f in (sample_run / "deduped").glob("*.parquet"))
    assert sum(f.documents for f in manifest.files) == deduped
    rows = [json.loads(line) for line in (sample_run / "train" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0] - 0.5
    assert (sample_run / "train" / "hf" / "config.json").is_file()


def test_the_chain_evaluates_the_model_on_documents_it_did_not_train_on(sample_run: Path) -> None:
    """evals.final: bits per byte on the trainer's held-out shard file (decoded) and BLiMP from the shared data."""
    from evals.final import held_out_documents

    report = json.loads((sample_run / "train" / "eval.json").read_text())
    line = next(x for x in (sample_run / "cli-stdout.txt").read_text().splitlines() if x.startswith("final evaluation"))
    assert line == report["summary"] and report["summary"] in (sample_run / "report" / "index.html").read_text()
    held_out = held_out_documents(sample_run / "mixture", sample_run / "tokenizer" / "tokenizer.json", 1)
    deduped = set(pq.read_table(sample_run / "deduped", columns=["text"]).column("text").to_pylist())
    assert held_out and set(held_out) <= deduped  # the exact texts of kept documents ...
    assert len(held_out) == report["held_out"]["documents"] < len(deduped)  # ... that the training files lack
    bpb = report["tasks"]["bpb"]
    assert bpb["bytes"] == sum(len(t.encode()) for t in held_out) and 0 < bpb["bits_per_byte"] < 8
    if "blimp" in report["tasks"]:  # the shared data's BLiMP, found without a flag
        assert report["tasks"]["blimp"]["n"] == 1340 and len(report["tasks"]["blimp"]["by_paradigm"]) == 67


def test_removed_documents_keep_their_reason(sample_run: Path) -> None:
    reasons: Counter = Counter()
    for file in sample_run.glob("removed/*/*.parquet"):
        for row in pq.read_table(file, columns=["filter_reason"]).to_pylist():
            assert row["filter_reason"], file
            reasons[(file.parent.name, row["filter_reason"])] += 1
    steps = {step for step, _ in reasons}
    assert {"language", "gopher_repetition", "gopher_quality"} <= steps, reasons


def test_stats_add_up(sample_run: Path) -> None:
    stats = json.loads((sample_run / "stats.json").read_text())
    steps = stats["stages"]["curate"]["steps"]
    reader = steps[0]["counters"]
    assert reader["records"] > 800 and reader["truncated_member"] >= 1
    filters = [s for s in steps if s["kept"] is not None]
    for step in filters:
        assert step["in"] == step["kept"] + (step["dropped"] or 0), step
        assert sum(step["dropped_by_reason"].values()) == (step["dropped"] or 0), step
    for before, after in zip(filters, filters[1:], strict=False):
        assert after["in"] == before["kept"]
    curated = len(_ids(sample_run / "curated"))
    assert filters[-1]["kept"] == curated
    removed = sum(len(_ids(p)) for p in (sample_run / "removed").iterdir() if p.name != "minhash")
    assert filters[0]["in"] == curated + removed


def test_sample_decisions_follow_the_page_kinds(sample_run: Path) -> None:
    kinds = _sample_kinds()
    kept_urls = []
    for file in sample_run.glob("curated/*.parquet"):
        kept_urls += pq.read_table(file, columns=["url"]).column("url").to_pylist()
    kept = Counter(kinds.get(url, "?") for url in kept_urls)
    total = Counter(kinds.values())
    assert kept["good"] >= 0.95 * total["good"], kept
    assert kept["spam"] == 0 and kept["other_language"] == 0 and kept["non_html"] == 0, kept
    assert kept["boilerplate"] <= 0.2 * total["boilerplate"], kept


def test_rerun_skips_finished_tasks(sample_run: Path) -> None:
    before = sorted(_ids(sample_run / "curated"))
    run_json = json.loads((sample_run / "run.json").read_text())
    proc = run_cli("pipelines.run", *run_json["command"][3:])
    assert "already been completed" in proc.stderr + proc.stdout
    assert sorted(_ids(sample_run / "curated")) == before


def test_bad_input_is_one_line_before_any_work(tmp_path: Path) -> None:
    missing = run_cli("pipelines.run", str(tmp_path / "nope.warc.gz"), "--out", str(tmp_path), check=False)
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "input not found" in missing.stderr
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("rules:\n  gopher_quality:\n    min_doc_wrds: 10\n")
    bad = run_cli("pipelines.run", "sample", "--recipe", str(recipe), "--out", str(tmp_path), check=False)
    assert bad.returncode == 2 and "min_doc_wrds" in bad.stderr and bad.stderr.strip().count("\n") == 0
    recipe.write_text("rules: [unclosed\n")
    broken = run_cli("pipelines.run", "sample", "--recipe", str(recipe), "--out", str(tmp_path), check=False)
    assert broken.returncode == 2 and "not valid YAML" in broken.stderr
    assert not list(tmp_path.glob("sample"))


def test_help_explains_options() -> None:
    proc = run_cli("pipelines.run", "--help")
    for option in ("--out", "--limit-warcs", "--tasks", "--workers", "--recipe", "--languages", "--executor"):
        assert option in proc.stdout


def test_crawl_id_resolves_through_a_mirror(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_mirror(mirror, "CC-MAIN-2024-10", 3)
    out = tmp_path / "out"
    run_cli(
        "pipelines.run",
        "cc-2024-10",
        "--cc-base",
        str(mirror),
        "--limit-warcs",
        "2",
        "--out",
        str(out),
        "--no-dedup",
    )
    run_dir = out / "CC-MAIN-2024-10"
    rows = []
    for file in (run_dir / "curated").glob("*.parquet"):
        rows += pq.read_table(file, columns=["url", "dump"]).to_pylist()
    assert {r["dump"] for r in rows} == {"CC-MAIN-2024-10"}
    assert {r["url"].split("/")[2] for r in rows} == {"site0.example", "site1.example"}
    assert len(rows) == 24


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_mirror(mirror, "CC-MAIN-2024-18", 4)
    warcs = sorted(str(p) for p in mirror.rglob("*.warc.gz"))
    clean_out, killed_out = tmp_path / "clean", tmp_path / "killed"
    args = ["pipelines.run", *warcs, "--workers", "1", "--no-dedup"]
    run_cli(*args, "--out", str(clean_out))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", *args, "--out", str(killed_out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    completions = killed_out / "CC-MAIN-2024-18" / "completions" / "curate"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(completions.glob("*"))) < 2 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list(completions.glob("*")))
    assert done < 4, "the run finished before it could be killed"
    run_cli(*args, "--out", str(killed_out))
    clean = _ids(clean_out / "CC-MAIN-2024-18" / "curated")
    resumed = _ids(killed_out / "CC-MAIN-2024-18" / "curated")
    assert len(resumed) == len(set(resumed)) == len(clean) == 48
    assert sorted(resumed) == sorted(clean)
    shutil.rmtree(tmp_path / "mirror")
