"""``--executor ray`` on a two-node Ray cluster whose nodes share no disk, curating into an S3 bucket.

A head and a worker, each a separate ``ray start`` node process on 127.0.0.1 with its own ``--temp-dir``
and its own scratch (``TMPDIR``), reach the S3 server (moto, real s3fs) through their environment, as
nodes of a cloud cluster reach their bucket. The input WARC is read from the bucket, every task writes
its documents, stats and completions there, and the driver merges the stats and writes the report from
the store: the documents equal the local run's, and both nodes ran tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from pipelines.sample import SAMPLE_WARC
from tests.support.cli import REPO
from tests.support.ray_nodes import RAY, python_workers, two_node_cluster
from tests.support.run_compare import assert_same_run, files_under, local_sample  # noqa: F401
from tests.support.s3_server import S3Server, s3, s3_server_session, subprocess_env  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(RAY is None, reason="ray is not installed")]


@pytest.fixture
def cluster(s3: S3Server) -> Iterator[dict]:  # noqa: F811
    """Head + worker node processes, each with its own temp dir and scratch, reaching the S3 server."""
    with two_node_cluster(subprocess_env(s3, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")) as cluster:
        yield cluster


def test_two_nodes_without_a_shared_disk_curate_into_a_bucket(local_sample: Path, s3, cluster: dict) -> None:  # noqa: F811
    fs = fsspec.filesystem("s3")
    s3.make_bucket("cluster")
    fs.put_file(str(SAMPLE_WARC), f"cluster/input/{SAMPLE_WARC.name}")
    folders = cluster["folders"]
    env = {**cluster["env"], "RAY_ADDRESS": cluster["address"]}
    repo_before = files_under(REPO)
    command = [sys.executable, "-m", "pipelines.run", f"s3://cluster/input/{SAMPLE_WARC.name}", "--dump", "sample",
               "--executor", "ray", "--ray-address", cluster["address"], "--out", "s3://cluster/run",
               "--scratch", str(folders["driver"])]  # fmt: skip
    proc = subprocess.run(command, cwd=folders["driver"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]

    assert_same_run("s3://cluster/run/sample", local_sample)
    assert json.loads(fs.cat("cluster/run/sample/report/report.json"))["totals"]
    # two tasks at a time (the cluster's 2 CPUs) on nodes of 1 CPU each: both nodes ran tasks; each node's
    # Ray started Python workers there
    workers = {node: python_workers(folders[node]) for node in ("head", "worker")}
    print(f"python workers per node: {workers}")
    assert all(workers.values()), workers
    assert files_under(REPO) == repo_before
    assert list(folders["driver"].iterdir()) == []  # the driver's scratch folder removed at the end
