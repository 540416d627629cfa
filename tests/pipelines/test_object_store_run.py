"""``python -m pipelines.run sample --out s3://...`` against a real S3 server (moto on 127.0.0.1, real s3fs):
the same documents, removed documents and stats as a local run, the report in the bucket, nothing written
outside the node's scratch; bad stores and a second writer refused in one line before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

from common.object_lock import ObjectLock
from pipelines.run import main
from tests.support.cli import REPO
from tests.support.s3_server import (  # noqa: F401
    S3Server,
    clear_clients,
    free_port,
    s3,
    s3_server_session,
    subprocess_env,
)

DOCUMENT_FOLDERS = ("curated", "deduped", "removed")


def run_pipeline(server: S3Server, out: str, cwd: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, from ``cwd``, with the server's endpoint and credentials in its environment."""
    environment = subprocess_env(server, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1", **env)
    command = [sys.executable, "-m", "pipelines.run", "sample", "--out", out, "--workers", "2", *extra]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def files_under(root: Path) -> dict[str, int]:
    """Every file below ``root`` (links not followed) -> its modification time in ns."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not Path(folder, d).is_symlink()]
        for name in names:
            path = Path(folder, name)
            out[str(path)] = path.lstat().st_mtime_ns
    return out


def documents(root: str, folder: str) -> dict[str, list[dict]]:
    """``{relative file: rows}`` of every parquet file under ``root/folder`` (local or URL)."""
    fs, base = fsspec.core.url_to_fs(f"{root}/{folder}")
    out = {}
    for path in sorted(fs.glob(f"{base}/**/*.parquet")):
        with fs.open(path, "rb") as f:
            out[path[len(base) :]] = pq.read_table(f).to_pylist()
    return out


def stats_without_times(text: str) -> dict:
    stats = json.loads(text)
    for stage in stats["stages"].values():
        for step in stage["steps"]:
            step.pop("time_s")
    return stats


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.mark.e2e
def test_sample_to_s3_matches_a_local_run(sample_run: Path, s3, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3.make_bucket("runs")
    cwd, home, tmp, scratch = (tmp_path / name for name in ("cwd", "home", "tmp", "scratch"))
    for folder in (cwd, home, tmp, scratch):
        folder.mkdir()
    repo_before = files_under(REPO)
    proc = run_pipeline(s3, f"{bucket}/run", cwd, "--scratch", str(scratch), HOME=str(home), TMPDIR=str(tmp))
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "run directory: s3://runs/run/sample" in proc.stdout

    # nothing written on the node: not in the repository, the working directory, HOME, TMPDIR, the scratch
    assert files_under(REPO) == repo_before
    for folder in (cwd, home, tmp, scratch):
        assert not list(folder.iterdir()), f"{folder}: {list(folder.iterdir())}"

    store = "s3://runs/run/sample"
    for folder in DOCUMENT_FOLDERS:
        assert documents(store, folder) == documents(str(sample_run), folder), folder
    fs = fsspec.filesystem("s3")
    local_stats = (sample_run / "stats.json").read_text()
    assert stats_without_times(fs.cat("runs/run/sample/stats.json").decode()) == stats_without_times(local_stats)
    report = json.loads(fs.cat("runs/run/sample/report/report.json"))
    assert report["totals"] == json.loads((sample_run / "report" / "report.json").read_text())["totals"]
    assert fs.exists("runs/run/sample/report/index.html") and fs.exists("runs/run/sample/report/funnel.png")
    listing = fs.find("runs")
    assert "runs/run/sample/.lock" not in listing  # released at the end
    assert not [p for p in listing if p.endswith(".tmp")]  # no staged object left visible


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
    code = main(["sample", "--out", out, "--scratch", str(tmp_path / "scratch")])
    assert reason in error_line(subprocess.CompletedProcess([], code, "", capsys.readouterr().err))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # the server's variables again, to list the buckets
    clear_clients()
    assert fsspec.filesystem("s3").find("present") == [] and fsspec.filesystem("s3").find("readonly") == []
