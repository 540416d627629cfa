"""The cluster stage at scale: the single-task union-find against the distributed passes (dedup/star.py).

    python -m bench.dedup_cluster_scale --sizes 1000000 --tasks 4 --memory-mb 256

For each size: planted signatures (``dedup.evaluation.planted_signatures``: half of the documents in
clusters of 2-300, chains and trees, over 8 input ranks), the bucket stage, then (1) the union-find
task and (2) every task of every distributed pass, each in a fresh interpreter (the step is pickled and
run there, as an executor's worker would), with its peak RSS (VmHWM) and its seconds. Checks that
both write the same cluster files. Reports peak RSS per task against the cap, the union-find's, and the
time ratio: summed task seconds (CPU work) and the sum over stages of the slowest task (wall time with
one worker per task).

``--store``: the distributed stages' run folder on an S3 server (moto on 127.0.0.1, the real s3fs client; the
inputs and the union-find stay local), with the requests it got (``python -m bench.dedup_cluster_scale --sizes
2000000 --tasks 2 --store``).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from datatrove.io import get_datafolder

from common.cli import ArgumentParser
from dedup.buckets import DedupBuckets
from dedup.clusters import DedupClusters
from dedup.config import DedupConfig
from dedup.evaluation import planted_signatures
from dedup.formats import CLUSTER, CLUSTER_KIND, clusters_path
from dedup.records import open_records
from dedup.star import cluster_stages
from tests.support.processes import peak_rss_kib
from tests.support.s3_server import S3Server

ROOT = Path(__file__).resolve().parents[1]
RANKS = 8


def child(pickled: str, rank: int, world: int) -> None:
    with open(pickled, "rb") as f:
        step = pickle.load(f)
    start = time.perf_counter()
    step.run(rank=rank, world_size=world)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_mb": peak_rss_kib() / 1024}))  # VmHWM: see peak_rss_kib


def run_task(step: object, rank: int, world: int, folder: str) -> dict:
    path = f"{folder}/step.pkl"
    with open(path, "wb") as f:
        pickle.dump(step, f)
    cmd = [sys.executable, "-m", "bench.dedup_cluster_scale", "--child", path, str(rank), str(world)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def same_files(a: str, b: str, config: DedupConfig) -> bool:
    fp = config.fingerprint("minhash")
    for r in range(RANKS):
        x = open_records(get_datafolder(a), clusters_path(r), CLUSTER_KIND, fp, CLUSTER, r, RANKS).read_all()
        y = open_records(get_datafolder(b), clusters_path(r), CLUSTER_KIND, fp, CLUSTER, r, RANKS).read_all()
        if not np.array_equal(x, y):
            return False
    return True


def measure(n: int, tasks: int, memory_mb: int, tmp: str, out: str | None = None) -> dict:
    """``out``: the distributed stages' run folder (default: ``tmp/ours``)."""
    config = DedupConfig()
    sigs, pairs = f"{tmp}/sigs", f"{tmp}/pairs"
    planted_signatures(sigs, n, RANKS, config)
    for band in range(config.num_buckets):
        DedupBuckets(sigs, pairs, config).run(rank=band, world_size=config.num_buckets)
    single = run_task(DedupClusters(pairs, sigs, f"{tmp}/single", config), 0, 1, tmp)
    ours = replace(config, cluster_tasks=tasks, cluster_memory_mb=memory_mb)
    stages = []
    out = out or f"{tmp}/ours"
    # every task of every stage is run here, none is skipped by a completion marker: nothing to drop for a rerun
    # (given, so that the driver checks each stage's files before the next one, as dedup.run and pipelines.run do)
    for name, steps, world in cluster_stages("dedup", pairs, sigs, out, ours, "minhash", lambda stage, rank: None):
        runs = [run_task(steps[0], rank, world, tmp) for rank in range(world)]
        stages.append({"stage": name, "tasks": world, "runs": runs})
    task_seconds = sum(r["seconds"] for s in stages for r in s["runs"])
    critical = sum(max(r["seconds"] for r in s["runs"]) for s in stages)
    summary = json.loads(Path(tmp, "single", "summary.json").read_text())
    return {
        "documents": n,
        "in_clusters": summary["documents_in_clusters"],
        "identical": same_files(f"{tmp}/single", out, config),
        "union_find": single,
        "passes": sum(1 for s in stages if "_pass_" in s["stage"]),
        "stages": len(stages),
        "task_peak_mb": max(r["peak_mb"] for s in stages for r in s["runs"]),
        "cap_mb": memory_mb,
        "task_seconds": round(task_seconds, 2),
        "critical_path_seconds": round(critical, 2),
        "ratio_task_seconds": round(task_seconds / single["seconds"], 2),
        "ratio_critical_path": round(critical / single["seconds"], 2),
    }


def main() -> None:
    p = ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="*", default=[1_000_000])
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--memory-mb", type=int, default=256)
    p.add_argument("--store", action="store_true", help="the distributed run folder on a local S3 server (moto)")
    p.add_argument("--child", nargs=3, metavar=("PICKLE", "RANK", "WORLD"))
    a = p.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]))
        return
    for n in a.sizes:
        with tempfile.TemporaryDirectory(dir=ROOT.parent) as tmp:
            if not a.store:
                print(json.dumps(measure(n, a.tasks, a.memory_mb, tmp)), flush=True)
                continue
            server = S3Server(log=Path(tmp, "requests.log")).start()
            try:
                with server.use():  # the tasks' interpreters inherit its endpoint
                    result = measure(n, a.tasks, a.memory_mb, tmp, f"{server.make_bucket('bench')}/ours")
            finally:
                server.stop()
            requests = sum(" HTTP/1.1" in line for line in Path(tmp, "requests.log").read_text().splitlines())
            print(json.dumps(result | {"store_requests": requests}), flush=True)


if __name__ == "__main__":
    main()
