"""``python -m pipelines.run sample --out s3://...`` against a real S3 server (moto on 127.0.0.1, real s3fs):
the same documents, removed documents and stats as a local run, the report in the bucket, nothing written
outside the node's scratch; bad stores and a second writer refused in one line before any work."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

from common.object_lock import ObjectLock
from pipelines.run import STORE_FAR_S, STORE_WORKERS, build_parser, main, store_workers
from tests.support.cli import REPO
from tests.support.holding_proxy import HoldingProxy
from tests.support.run_compare import assert_same_run, files_under, local_sample  # noqa: F401
from tests.support.s3_server import (  # noqa: F401
    S3Server,
    clear_clients,
    free_port,
    s3,
    s3_server_session,
    subprocess_env,
)


def pipeline_command(server: S3Server, out: str, *extra: str, **env: str) -> tuple[list[str], dict[str, str]]:
    """The CLI as a user runs it, with the server's endpoint and credentials in its environment."""
    environment = subprocess_env(server, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1", **env)
    return [sys.executable, "-m", "pipelines.run", "sample", "--out", out, "--workers", "2", *extra], environment


def run_pipeline(server: S3Server, out: str, cwd: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    command, environment = pipeline_command(server, out, *extra, **env)
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def kill_mid_curation(server: S3Server, out: str, cwd: Path, *extra: str, **env: str) -> None:
    """Start the run through a HoldingProxy that holds the curate task's first upload of curated documents in
    flight, then SIGKILL its whole process group at exactly that point (the task has extracted and filtered,
    its writers are open, nothing of its output has reached the store), however fast or loaded the machine."""
    bucket_path = out[len("s3://") :]
    pattern = rb"(PUT|POST) /" + re.escape(bucket_path.encode()) + rb"/sample/curated/"
    with HoldingProxy(server.port, pattern, let_through=0) as proxy:
        command, environment = pipeline_command(server, out, *extra, **env, AWS_ENDPOINT_URL=proxy.endpoint)
        proc = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 240
        try:
            while not proxy.held.wait(0.1):
                assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before its upload was held"
                assert time.monotonic() < deadline, "no upload of curated documents reached the proxy in 240 s"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.fixture
def node_folders() -> Iterator[dict[str, Path]]:
    """Empty cwd, HOME, TMPDIR and scratch folders with short paths (the worker pool's Unix sockets live there)."""
    root = Path(tempfile.mkdtemp(prefix="s3run-", dir="/tmp"))
    folders = {name: root / name for name in ("cwd", "home", "tmp", "scratch", "caches")}
    for folder in folders.values():
        folder.mkdir()
    yield folders
    shutil.rmtree(root)


@pytest.mark.e2e
def test_sample_to_s3_killed_then_rerun_matches_a_local_run(
    local_sample: Path,  # noqa: F811
    s3,  # noqa: F811
    node_folders: dict[str, Path],
) -> None:
    bucket = s3.make_bucket("runs")
    cwd, home, tmp, scratch, caches = (node_folders[n] for n in ("cwd", "home", "tmp", "scratch", "caches"))
    args = ("--scratch", str(scratch))
    # per-user caches that libraries fill on import (matplotlib's font list, huggingface_hub's assets folder
    # datatrove asks for): named, so that HOME itself must stay empty
    env = {"HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(caches), "MPLCONFIGDIR": str(caches / "mpl")}
    repo_before = files_under(REPO)
    fs = fsspec.filesystem("s3")

    kill_mid_curation(s3, f"{bucket}/run", cwd, *args, **env)
    fs.invalidate_cache()
    visible = fs.find("runs")
    assert "runs/run/sample/completions/curate/00000" not in visible  # the task had not finished
    for path in (p for p in visible if p.endswith(".parquet")):  # no partial object visible to a reader
        with fs.open(path, "rb") as f:
            pq.read_table(f)
    killed_scratch = set(scratch.iterdir())  # the killed run could not clean its scratch folder

    proc = run_pipeline(s3, f"{bucket}/run", cwd, *args, **env)  # takes over the dead run's lock
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "run directory: s3://runs/run/sample" in proc.stdout

    # nothing written on the node: not in the repository, the working directory, HOME, TMPDIR; the rerun's
    # scratch folder removed
    assert files_under(REPO) == repo_before
    for folder in (cwd, home, tmp):
        assert not list(folder.iterdir()), f"{folder}: {list(folder.iterdir())}"
    assert set(scratch.iterdir()) == killed_scratch
    assert {p.name for p in caches.iterdir()} <= {"mpl", "huggingface"}

    assert_same_run("s3://runs/run/sample", local_sample)
    fs = fsspec.filesystem("s3")
    report = json.loads(fs.cat("runs/run/sample/report/report.json"))
    assert report["totals"] == json.loads((local_sample / "report" / "report.json").read_text())["totals"]
    assert fs.exists("runs/run/sample/report/index.html") and fs.exists("runs/run/sample/report/funnel.png")
    listing = fs.find("runs")
    assert "runs/run/sample/.lock" not in listing  # released at the end
    assert not [p for p in listing if p.endswith(".tmp")]  # no staged object left visible


def test_the_per_band_stages_run_more_tasks_at_once_only_on_a_far_store(tmp_path: Path, capsys) -> None:
    """``--store-workers``: the dedup stage of one small task per band waits on a far store, not the CPU."""
    parse, cpus, far = build_parser().parse_args, os.cpu_count() or 1, STORE_FAR_S * 2
    args = parse(["sample"])
    assert store_workers(args, 14, far) == min(14, max(cpus, STORE_WORKERS))
    assert store_workers(args, 3, far) == 3  # never more than the tasks
    assert store_workers(args, 14, STORE_FAR_S / 2) is None  # a near store: the CPU count, as before
    assert store_workers(parse(["sample", "--store-workers", "3"]), 14, far) == max(cpus, 3)
    assert store_workers(parse(["sample", "--workers", "1"]), 14, far) is None  # asked for
    with pytest.raises(SystemExit) as exit_:
        main(["sample", "--out", str(tmp_path / "out"), "--store-workers", "0"])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].startswith("error:")
    assert not (tmp_path / "out").exists()


def test_a_second_run_on_the_same_bucket_is_refused_naming_the_holder(s3, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3.make_bucket("busy")
    with ObjectLock(f"{bucket}/run/sample", "pipelines.run"):
        proc = run_pipeline(s3, f"{bucket}/run", tmp_path)
        line = error_line(proc)
    assert "s3://busy/run/sample is being written by another pipelines.run" in line
    assert f"pid {os.getpid()}" in line
    assert fsspec.filesystem("s3").find("busy") == []  # the holder released its lock; the refused run wrote nothing


@pytest.mark.parametrize(
    ("out", "env", "reason"),
    [
        ("s3://absent/run", {}, "bucket 'absent' does not exist"),
        ("nosuch://bucket/run", {}, "unknown storage scheme nosuch://"),
        (
            "s3://present/run",
            {
                "AWS_ACCESS_KEY_ID": "",
                "AWS_SECRET_ACCESS_KEY": "",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_CONFIG_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true",
            },
            "no credentials",
        ),  # fmt: skip
        ("s3://present/run", {"AWS_ENDPOINT_URL": "http://127.0.0.1:{port}"}, "the store does not answer"),
        ("s3://readonly/run", {}, "s3://readonly/run/sample: cannot write there"),
    ],
    ids=["no-bucket", "unknown-scheme", "no-credentials", "endpoint-silent", "read-only"],
)
def test_a_store_the_run_cannot_use_is_one_line_before_any_work(
    s3,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: str,
    env: dict[str, str],
    reason: str,
) -> None:
    """In this process (the CLI's ``main``), to spare a Python start per case."""
    import boto3

    s3.make_bucket("present")
    s3.make_bucket("readonly")
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::readonly/*"}
    policy = json.dumps({"Version": "2012-10-17", "Statement": [deny]})
    boto3.client("s3", endpoint_url=s3.endpoint).put_bucket_policy(Bucket="readonly", Policy=policy)
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(port=free_port()))
    monkeypatch.chdir(tmp_path)
    clear_clients()
    code = main(["sample", "--out", out])
    assert reason in error_line(subprocess.CompletedProcess([], code, "", capsys.readouterr().err))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # the server's variables again, to list the buckets
    clear_clients()
    assert fsspec.filesystem("s3").find("present") == [] and fsspec.filesystem("s3").find("readonly") == []
