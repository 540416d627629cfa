"""The distributed clustering (dedup/star.py) with its run directory on an object store: moto's S3 server on
127.0.0.1 and the real s3fs client, the tasks on datatrove's local executor. A task killed between committing two
of its files is run again, alone, and the clusters are the single-task union-find's."""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from dataclasses import replace

import fsspec
import numpy as np
import pytest
from datatrove.io import get_datafolder

from dedup.extsort import KEYED
from dedup.formats import clusters_path
from dedup.records import open_records
from dedup.star import EDGE_KIND, drop_completions, pass_dir, receipt_path
from tests.dedup.test_star import SMALL_CAP, kill_when_held, plant, read_clusters, run_local_executor
from tests.support.cluster_holds import TASKS
from tests.support.holding_proxy import HoldingProxy
from tests.support.s3_server import S3Server, clear_clients, s3, s3_server_session  # noqa: F401

BUCKET = "run"
HELD_TASK = 1
# the first large-star's task 1 commits its file for task 0, then its file for task 1 (held), then its receipt
COMMITTED, HELD = (f"{pass_dir(1)}/{dst:05d}/{HELD_TASK:05d}.edges" for dst in range(TASKS))
TASK_0 = [f"{pass_dir(1)}/{dst:05d}/00000.edges" for dst in range(TASKS)]  # the other task's, whole
CUT_SHORT = TASK_0[0]


@pytest.fixture(scope="module")
def planted_small(tmp_path_factory):
    """20k documents on 5 ranks, their pairs, and the single task's clusters, on the local disk."""
    return plant(tmp_path_factory.mktemp("planted_small"), 20_000)


def run_through(endpoint: str, *args: object) -> None:
    """``run_local_executor`` in a forked process whose store requests go to ``endpoint``."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    clear_clients()
    run_local_executor(*args)  # type: ignore[arg-type]


@pytest.mark.e2e
def test_killed_between_two_committed_edge_files_on_the_store(planted_small, s3, tmp_path, monkeypatch):  # noqa: F811
    """Signatures, pairs, clusters and logs in a bucket. A HoldingProxy holds the first large-star task 1's upload
    of its second edge file, and the run is SIGKILLed there: its first edge file committed, its second and its
    receipt not, no completion marker. Then task 0's first edge file, whose receipt and completion marker are there,
    is cut short on the store. The rerun writes exactly the two tasks' files of the pass again (task 0's once its
    file is found short, before the next pass), and the clusters, ids and sizes are the union-find's, with nothing
    left in the bucket beside them."""
    base, config = planted_small
    config = replace(config, cluster_tasks=TASKS, cluster_memory_mb=SMALL_CAP)
    s3.make_bucket(BUCKET)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for folder in ("sigs", "pairs"):
        fs.put(str(base / folder), f"{BUCKET}/{folder}", recursive=True)
    root, logs = f"s3://{BUCKET}", f"s3://{BUCKET}/logs"
    rerun = drop_completions(lambda stage: f"{logs}/{stage}")
    args = ("dedup", f"{root}/pairs", f"{root}/sigs", f"{root}/clusters", config, "minhash", rerun)
    scratch = tmp_path / "scratch"  # the tasks' sort runs and staged files: the node's disk
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    held = rb"PUT /" + f"{BUCKET}/clusters/{HELD}".encode() + rb"[ ?]"
    with HoldingProxy(s3.port, held, let_through=0) as proxy:
        run = multiprocessing.get_context("fork").Process(target=run_through, args=(proxy.endpoint, args, logs, 1))
        run.start()
        kill_when_held(run, lambda _: proxy.held.is_set())
    clusters = get_datafolder(f"{root}/clusters")
    fp = config.fingerprint("minhash")
    assert open_records(clusters, COMMITTED, EDGE_KIND, fp, KEYED, rank=HELD_TASK, world_size=TASKS).n_records > 0
    fs.invalidate_cache()
    assert not fs.exists(f"{BUCKET}/clusters/{HELD}")
    assert not fs.exists(f"{BUCKET}/clusters/{receipt_path(pass_dir(1), HELD_TASK)}")
    assert fs.exists(f"{BUCKET}/clusters/{receipt_path(pass_dir(1), 0)}")  # one worker: task 0 ran first, whole
    completions = f"{BUCKET}/logs/dedup_clusters_pass_001/completions"
    assert fs.ls(completions) == [f"{completions}/00000"]
    killed = set(scratch.glob("cc2model-spill-*"))  # the killed task's own: a SIGKILL removes nothing
    short = f"{BUCKET}/clusters/{CUT_SHORT}"
    fs.pipe_file(short, fs.cat_file(short)[:-100])  # a finished task's object truncated on the store

    writes = rb"(PUT|POST) /" + f"{BUCKET}/clusters/{pass_dir(1)}/".encode() + rb"[^ ?]*"
    with HoldingProxy(s3.port, writes, let_through=1 << 30) as recorder, monkeypatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", recorder.endpoint)
        clear_clients()
        run_local_executor(args, logs)
    clear_clients()
    rewritten = sorted(line.split()[1].decode() for line in recorder.matched)
    again = [COMMITTED, HELD, receipt_path(pass_dir(1), HELD_TASK), *TASK_0, receipt_path(pass_dir(1), 0)]
    assert rewritten == sorted(f"/{BUCKET}/clusters/{path}" for path in again)

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.get(f"{BUCKET}/clusters", str(tmp_path / "got"), recursive=True)
    single, ours = read_clusters(base / "single", config, 5), read_clusters(tmp_path / "got", config, 5)
    assert all(np.array_equal(a, b) for a, b in zip(single, ours, strict=True))
    assert json.loads((tmp_path / "got" / "summary.json").read_text()) == json.loads(
        (base / "single" / "summary.json").read_text()
    )
    names = [*(clusters_path(r) for r in range(5)), "summary.json"]
    assert fs.find(f"{BUCKET}/clusters") == [f"{BUCKET}/clusters/{name}" for name in names]
    assert not [key for key in fs.find(BUCKET) if key.endswith(".tmp")]
    assert set(scratch.glob("cc2model-spill-*")) == killed  # every task that ended removed its scratch
