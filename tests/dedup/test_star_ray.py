"""The distributed clustering passes (dedup/star.py) as Ray work: ``dedup.run --executor ray`` on a real two-node
Ray cluster (head + worker on 127.0.0.1) gives the single-task union-find's cluster ids and sizes. The Ray run
resumes a run whose signatures and buckets are done (copied from the single-task run: the same files, whatever the
cluster stage), which also keeps the test short. Two of its tasks are SIGKILLed (Ray worker and task) at points
the test decides, each after the task wrote part of its output (FIFOs where it opens its next file,
``tests/support/fifo_holds.py``): the first large-star pass's rank 1 with its edges written and its receipt not,
and the write stage's task 0 between its ranks' cluster files. The executor resubmits each and the run ends with
the same clusters, removed documents and summary."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
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
from tests.support.cluster_holds import PASS_HOLD, WRITE_HOLD, killed_mid_pass, killed_mid_write
from tests.support.fifo_holds import hold_open, release_open
from tests.support.processes import wait_gone
from tests.support.ray_nodes import RAY, held_task, python_workers, two_node_cluster

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
    log, clusters = tmp_path / "driver.log", tmp_path / "ray" / "minhash" / "clusters"
    fp, logs = config.fingerprint("minhash"), tmp_path / "ray" / "logs"
    holds = {PASS_HOLD: lambda: killed_mid_pass(clusters, logs, fp),
             WRITE_HOLD: lambda: killed_mid_write(clusters, logs, fp, RANKS)}  # fmt: skip
    for hold in holds:
        hold_open(clusters / hold)
    with two_node_cluster({**os.environ, "PYTHONPATH": str(REPO)}) as cluster:
        folders = cluster["folders"]
        command = [sys.executable, "-m", "dedup.run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "ray"),
                   "--executor", "ray", "--ray-address", cluster["address"], "--word-split", "whitespace",
                   "--cluster-tasks", "2", "--cluster-memory-mb", "122"]  # fmt: skip
        with log.open("w") as out:
            proc = subprocess.Popen(command, cwd=folders["driver"], env=cluster["env"], stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
        try:
            for hold, left in holds.items():
                task, worker = held_task(folders)
                left()
                release_open(clusters / hold)  # the resubmitted task opens a regular file
                for pid in (worker, task):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                assert not wait_gone({worker, task}), "the killed task lives on"
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = log.read_text()
        assert proc.returncode == 0, output[-5000:]
        workers = {node: python_workers(folders[node]) for node in ("head", "worker")}
    print(output)
    resubmitted = re.findall(r"failed with (?:retriable error )?(?:RayActorError|WorkerCrashedError)", output)
    assert len(resubmitted) == 2  # the two kills
    assert "[ray] dedup_buckets: 14/14 tasks" in output and "dedup_buckets: 0/" not in output  # skipped
    assert "[ray] dedup_clusters_route: 2/2 tasks" in output and "[ray] dedup_clusters_write: 2/2 tasks" in output
    assert "[ray] dedup_clusters_pass_004: 2/2 tasks" in output  # chains take more than one round
    assert all(workers.values()), workers  # both nodes ran tasks
    for a, b in zip(_clusters(tmp_path / "single", config), _clusters(tmp_path / "ray", config), strict=True):
        assert np.array_equal(a, b)  # same documents, cluster ids, sizes and kept documents
    summaries = [json.loads((tmp_path / r / "minhash/clusters/summary.json").read_text()) for r in ("single", "ray")]
    assert summaries[0] == summaries[1]
    removed = [sorted(pq.read_table(tmp_path / r / "removed" / "minhash").column("id").to_pylist())
               for r in ("single", "ray")]  # fmt: skip
    assert removed[0] == removed[1]
