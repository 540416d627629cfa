"""``--executor ray`` on a two-node Ray cluster whose nodes share no disk, curating into an S3 bucket.

A head and a worker, each a separate ``ray start`` node process on 127.0.0.1 with its own ``--temp-dir``
and its own scratch (``TMPDIR``), reach the S3 server (moto, real s3fs) through their environment, as
nodes of a cloud cluster reach their bucket. The input WARC is read from the bucket, every task writes
its documents, stats and completions there, and the driver merges the stats and writes the report from
the store: the documents equal the local run's, and both nodes ran tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from pipelines.ray_cluster.auth import MODE_VAR, TOKEN_PATH_VAR, TOKEN_VAR
from pipelines.sample import SAMPLE_WARC
from tests.support.cli import REPO
from tests.support.processes import alive, descendants, wait_gone
from tests.support.run_compare import assert_same_run, files_under, local_sample  # noqa: F401
from tests.support.s3_server import S3Server, free_port, s3, s3_server_session, subprocess_env  # noqa: F401

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(RAY is None, reason="ray is not installed")]
NODE_ARGS = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([RAY, "start", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip


def _wait_for_nodes(address: str, env: dict[str, str], nodes: list[subprocess.Popen], count: int) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and all(n.poll() is None for n in nodes):
        status = subprocess.run([RAY, "status", "--address", address], env=env, capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        if status.returncode == 0 and status.stdout.count("node_") >= count:
            return
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster at {address} did not reach {count} nodes")


def _stop(nodes: list[subprocess.Popen], started: set[int]) -> None:
    """These nodes' processes only, by pid (``ray stop`` would stop every Ray cluster on the machine)."""
    tree = started | {p for n in nodes for p in descendants(n.pid)} | {n.pid for n in nodes}
    for sig, pids in ((signal.SIGTERM, alive(tree)), (signal.SIGKILL, wait_gone(tree, timeout=15))):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    for node in nodes:
        node.wait(timeout=30)


@pytest.fixture
def cluster(s3: S3Server) -> Iterator[dict]:  # noqa: F811
    """Head + worker node processes, each with its own temp dir and scratch; the address and the folders."""
    root = Path(tempfile.mkdtemp(prefix="rs3-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    folders = {n: root / n for n in ("head", "worker", "head-scratch", "worker-scratch", "driver", "caches")}
    for folder in folders.values():
        folder.mkdir()
    token = root / "token"
    token.write_text(uuid.uuid4().hex)
    port = free_port()
    address = f"127.0.0.1:{port}"
    auth = {MODE_VAR: "token", TOKEN_PATH_VAR: str(token)}
    base = {k: v for k, v in subprocess_env(s3, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1").items()
            if k not in ("RAY_ADDRESS", TOKEN_VAR)}  # fmt: skip
    base.update(auth, XDG_CACHE_HOME=str(folders["caches"]), MPLCONFIGDIR=str(folders["caches"] / "mpl"))
    head_args = ["--head", "--port", str(port), "--include-dashboard=false", f"--temp-dir={folders['head']}"]
    nodes = [_start([*head_args, *NODE_ARGS], {**base, "TMPDIR": str(folders["head-scratch"])})]
    started: set[int] = set()
    try:
        _wait_for_nodes(address, base, nodes, 1)
        worker_args = ["--address", address, f"--temp-dir={folders['worker']}"]
        nodes.append(_start([*worker_args, *NODE_ARGS], {**base, "TMPDIR": str(folders["worker-scratch"])}))
        _wait_for_nodes(address, base, nodes, 2)
        started = {p for n in nodes for p in descendants(n.pid)}
        yield {"address": address, "env": base, "folders": folders}
    finally:
        _stop(nodes, started)
        shutil.rmtree(root, ignore_errors=True)


def _python_workers(temp_dir: Path) -> int:
    """Python worker processes Ray started on the node whose temp dir this is (their core-worker logs)."""
    return len(list(temp_dir.glob("session_*/logs/python-core-worker-*.log")))


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
    workers = {node: _python_workers(folders[node]) for node in ("head", "worker")}
    print(f"python workers per node: {workers}")
    assert all(workers.values()), workers
    assert files_under(REPO) == repo_before
    assert list(folders["driver"].iterdir()) == []  # the driver's scratch folder removed at the end
