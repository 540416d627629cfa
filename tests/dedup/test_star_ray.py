"""The distributed clustering passes (dedup/star.py) as Ray work: ``dedup.run --executor ray`` on a real two-node
Ray cluster (head + worker on 127.0.0.1) gives the single-task union-find's cluster ids and sizes. The Ray run
resumes a run whose signatures and buckets are done (copied from the single-task run: the same files, whatever the
cluster stage), which also keeps the test short."""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.io import get_datafolder

from dedup.config import DedupConfig
from dedup.evaluation import near_duplicate
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.keys import MinhashKeyer
from dedup.records import open_records
from dedup.run import run_dedup
from tests.support.cli import REPO
from tests.support.ray_nodes import RAY, python_workers, two_node_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(RAY is None, reason="ray is not installed")]
RANKS = 3


def _documents(folder: Path, config: DedupConfig) -> None:
    """300 random-word documents over 3 parquet files, half of them with chains of 1 to 4 near-duplicates
    (Jaccard 0.8-0.95 to the one before), shuffled: clusters that take the passes several rounds."""
    rng = random.Random(33)
    vocabulary = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(3000)]
    keyer = MinhashKeyer(config)
    rows = []
    for i in range(300):
        text = " ".join(rng.choices(vocabulary, k=120))
        rows.append(text)
        for _ in range(rng.choice([1, 2, 4]) if i % 2 else 0):
            text, _ = near_duplicate(text.split(), rng.uniform(0.8, 0.95), keyer.shingles, rng, vocabulary)
            rows.append(text)
    rng.shuffle(rows)
    folder.mkdir()
    for rank in range(RANKS):
        part = rows[rank::RANKS]
        table = pa.table({"id": [f"{rank}-{j}" for j in range(len(part))], "text": part})
        pq.write_table(table, folder / f"{rank:05d}.parquet")


def _clusters(run: Path, config: DedupConfig) -> list[np.ndarray]:
    folder, fp = get_datafolder(str(run / "minhash" / "clusters")), config.fingerprint("minhash")
    files = [open_records(folder, clusters_path(r), CLUSTER_KIND, fp, CLUSTER, r, RANKS) for r in range(RANKS)]
    return [f.read_all() for f in files]


def test_star_passes_on_two_ray_nodes_equal_the_union_find(tmp_path: Path) -> None:
    config = DedupConfig(word_split="whitespace")
    _documents(tmp_path / "in", config)
    single = run_dedup(str(tmp_path / "in"), str(tmp_path / "single"), config, workers=2)  # the union-find
    assert "dedup_clusters_pass_001" not in single["seconds"] and single["minhash"]["removed"] > 150
    for done in ("minhash/signatures", "minhash/buckets", "logs/dedup_signatures", "logs/dedup_buckets"):
        shutil.copytree(tmp_path / "single" / done, tmp_path / "ray" / done)  # a run resumed after its buckets
    with two_node_cluster({**os.environ, "PYTHONPATH": str(REPO)}) as cluster:
        command = [sys.executable, "-m", "dedup.run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "ray"),
                   "--executor", "ray", "--ray-address", cluster["address"], "--word-split", "whitespace",
                   "--cluster-tasks", "2", "--cluster-memory-mb", "122"]  # fmt: skip
        proc = subprocess.run(command, cwd=cluster["folders"]["driver"], env=cluster["env"], capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        workers = {node: python_workers(cluster["folders"][node]) for node in ("head", "worker")}
    print(proc.stdout)
    assert "[ray] dedup_buckets: 14/14 tasks" in proc.stdout and "dedup_buckets: 0/" not in proc.stdout  # skipped
    assert "[ray] dedup_clusters_route: 2/2 tasks" in proc.stdout
    assert "[ray] dedup_clusters_pass_004: 2/2 tasks" in proc.stdout  # chains take more than one round
    assert all(workers.values()), workers  # both nodes ran tasks
    for a, b in zip(_clusters(tmp_path / "single", config), _clusters(tmp_path / "ray", config), strict=True):
        assert np.array_equal(a, b)  # same documents, cluster ids, sizes and kept documents
    summaries = [json.loads((tmp_path / r / "minhash/clusters/summary.json").read_text()) for r in ("single", "ray")]
    assert summaries[0] == summaries[1]
    removed = [sorted(pq.read_table(tmp_path / r / "removed" / "minhash").column("id").to_pylist())
               for r in ("single", "ray")]  # fmt: skip
    assert removed[0] == removed[1]
