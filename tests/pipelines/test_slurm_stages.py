"""``dedup.run`` and ``mixtures.build`` with ``--executor slurm`` on a real single-node Slurm cluster
(``tests/support/slurm_cluster.py``): the same commands as on this machine, the same outputs; a rerun of a
finished dedup submits nothing; bad input is one line, exit 2, nothing submitted."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.dedup.test_pipeline import make_corpus, read_ids
from tests.support.cli import run_cli
from tests.support.slurm_cluster import SlurmCluster, cluster_or_skip
from tests.support.text_corpora import write_parquet
from tests.support.trainer_inputs import word_tokenizer


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from cluster_or_skip()


def _rows(folder: Path) -> list[tuple[str, str]]:
    return sorted((r["id"], r["text"]) for r in read_ids(folder))


@pytest.mark.e2e
def test_dedup_on_slurm_equals_local_and_a_rerun_submits_nothing(slurm: SlurmCluster, tmp_path: Path) -> None:
    expected = make_corpus(tmp_path / "curated")
    run_cli("dedup.run", "--input", str(tmp_path / "curated"), "--out", str(tmp_path / "local"), "--workers", "1")
    args = ["dedup.run", "--input", str(tmp_path / "curated"), "--out", str(tmp_path / "slurm"), "--executor", "slurm"]
    proc = run_cli(*args)
    assert "[slurm] dedup_signatures: 3/3 tasks done" in proc.stdout, proc.stdout[-3000:]
    assert "[slurm] dedup_filter: 3/3 tasks done" in proc.stdout
    assert f"removed as near-duplicates: {len(expected['removed'])}" in proc.stdout
    local, on_slurm = tmp_path / "local", tmp_path / "slurm"
    assert _rows(on_slurm / "deduped") and _rows(on_slurm / "deduped") == _rows(local / "deduped")
    assert _rows(on_slurm / "removed" / "minhash") == _rows(local / "removed" / "minhash")
    jobs = json.loads((on_slurm / "logs/dedup_filter/slurm_jobs.json").read_text())
    assert (on_slurm / "logs/dedup_filter/launch_script.slurm").exists() and len(jobs) == 1

    queue_before = slurm.queue()
    run_cli(*args)  # every task completed: no array is submitted again
    assert json.loads((on_slurm / "logs/dedup_filter/slurm_jobs.json").read_text()) == jobs
    assert slurm.queue() == queue_before


def _mixture_inputs(root: Path) -> Path:
    """Two sources of random words and a word-level tokenizer; the spec's path."""
    rng = random.Random(3)
    for name, n in (("web", 60), ("wiki", 20)):
        rows = [{"id": f"{name}{i}", "text": " ".join(f"w{rng.randrange(1, 90)}" for _ in range(rng.randrange(20, 90)))}
                for i in range(n)]  # fmt: skip
        write_parquet(rows, root / name, n_files=2)
    spec = {
        "tokenizer": str(word_tokenizer(root / "tok" / "tokenizer.json", 96)),
        "target_tokens": 3000,
        "seq_len": 64,
        "seed": 7,
        "workers": 2,
        "tokens_per_file": 1000,
        "sources": [
            {"name": "web", "path": str(root / "web"), "weight": 0.7},
            {"name": "wiki", "path": str(root / "wiki"), "weight": 0.3, "max_repetition": 4},
        ],
    }
    path = root / "mixture.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.e2e
def test_a_mixture_built_on_slurm_equals_the_local_build(slurm: SlurmCluster, tmp_path: Path) -> None:
    spec = _mixture_inputs(tmp_path / "inputs")
    run_cli("mixtures.build", str(spec), "--out", str(tmp_path / "local"), "--quiet")
    proc = run_cli("mixtures.build", str(spec), "--out", str(tmp_path / "slurm"), "--quiet", "--executor", "slurm")
    lines = proc.stdout.splitlines()
    assert lines[0] == "[slurm] cost: 1 job x 2 CPU x --slurm-time 4:00:00: at most 8 CPU-hours reserved", lines
    assert lines[1].startswith("[slurm] submitted mixtures.build as Slurm job ")
    assert any("tokens/s in" in line for line in lines), proc.stdout  # the job's own summary, followed
    local = json.loads((tmp_path / "local" / "manifest.json").read_text())
    on_slurm = json.loads((tmp_path / "slurm" / "manifest.json").read_text())
    assert local["files"] and on_slurm["files"] == local["files"]  # paths, tokens, documents and sha256
    assert on_slurm["sources"] == local["sources"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "flags", "message"),
    [
        ("dedup", ["--slurm-partition", "gpu-h100"], "unknown partition 'gpu-h100'; available: debug, short"),
        ("dedup", ["--slurm-cpus-per-task", "3"], "--slurm-cpus-per-task 3: partition debug's nodes have 2"),
        ("mixture", ["--slurm-partition", "short", "--slurm-time", "10"], "--slurm-time 10 exceeds partition short"),
        ("mixture", ["--slurm-mem-per-cpu", "64"], "a task asks 128 GB (2 CPU x --slurm-mem-per-cpu 64)"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_submitted(
    slurm: SlurmCluster, tmp_path: Path, module: str, flags: list[str], message: str
) -> None:
    out = tmp_path / "out"
    if module == "dedup":
        make_corpus(tmp_path / "curated")
        args = ["dedup.run", "--input", str(tmp_path / "curated"), "--out", str(out)]
    else:
        args = ["mixtures.build", str(_mixture_inputs(tmp_path / "inputs")), "--out", str(out)]
    queue_before = slurm.queue()
    proc = run_cli(*args, "--executor", "slurm", *flags, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    assert not out.exists() and slurm.queue() == queue_before
