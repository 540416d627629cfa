"""The storage layer against a real S3 server (moto on 127.0.0.1, real s3fs): URLs stay URLs, stores that
cannot be used are one line before any work, atomic writes leave no partial object, the run lock works."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from common.atomic import atomic_open, atomic_write_text
from common.lock import FolderLock, FolderLocked, FolderUnavailable
from common.object_lock import STALE_AFTER_S, ObjectLock, acquire_output_lock, acquire_read_lock, break_lock, main
from common.storage import StorageError, as_path, check_store, is_remote, join
from common.transfer import download_folder
from tests.support.holding_proxy import HoldingProxy
from tests.support.s3_server import FOREIGN, clear_clients, free_port, s3, s3_server_session  # noqa: F401


def test_urls_are_never_folded_into_local_folders(tmp_path: Path) -> None:
    assert join("s3://bucket/run", "curated", "0.parquet") == "s3://bucket/run/curated/0.parquet"
    assert str(as_path("s3://bucket/run") / "stats.json") == "s3://bucket/run/stats.json"
    assert join(str(tmp_path), "a") == str(tmp_path / "a")
    assert as_path(f"file://{tmp_path}") == tmp_path and not is_remote(f"file://{tmp_path}")
    assert type(as_path(tmp_path)) is type(tmp_path)


def test_s3_urls_open_the_run_s_file_system_even_when_s3fs_was_loaded_first() -> None:
    """A program that used ``s3://`` before importing the project (fsspec then holds s3fs's class for the
    name; registering ours by its dotted name alone would not replace it) still gets ``RunStoreS3FileSystem``,
    without the look-ups it saves (``common/s3_store.py``). In a fresh interpreter: the order is the point."""
    pytest.importorskip("s3fs")
    code = (
        "import fsspec; assert fsspec.get_filesystem_class('s3').__name__ == 'S3FileSystem'\n"
        "from common.storage import filesystem\n"
        "print(type(filesystem('s3://bucket/key')[0]).__name__, fsspec.get_filesystem_class('s3a').__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RunStoreS3FileSystem", "RunStoreS3FileSystem"]


def test_unknown_scheme_is_one_line() -> None:
    with pytest.raises(StorageError, match=r"unknown storage scheme nosuch://"):
        check_store("nosuch://bucket/run")


def test_missing_bucket_and_missing_credentials(s3, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    with pytest.raises(StorageError, match="bucket 'absent' does not exist"):
        check_store("s3://absent/run")
    s3.make_bucket("present")
    check_store("s3://present/run")  # no error
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", *FOREIGN):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    clear_clients()
    with pytest.raises(StorageError, match="no credentials"):
        check_store("s3://present/run")


def test_endpoint_not_answering_is_reported_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nobody listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    start = time.monotonic()
    with pytest.raises(StorageError, match="does not answer"):
        check_store("s3://bucket/run")
    assert time.monotonic() - start < 30


def test_atomic_writes_to_the_store_leave_no_partial_object(s3) -> None:  # noqa: F811
    bucket = s3.make_bucket("atomic")
    atomic_write_text(f"{bucket}/run/stats.json", '{"a": 1}')
    fs = fsspec.filesystem("s3")
    assert fs.cat("atomic/run/stats.json") == b'{"a": 1}'
    with pytest.raises(RuntimeError), atomic_open(f"{bucket}/run/big.bin") as handle:
        handle.write(b"x" * 1_000_000)
        raise RuntimeError("killed mid-write")
    assert not fs.exists("atomic/run/big.bin")
    with atomic_open(f"{bucket}/run/big.bin") as handle:
        handle.write(b"y" * 1_000_000)
    assert fs.size("atomic/run/big.bin") == 1_000_000
    assert sorted(fs.ls("atomic/run", detail=False)) == ["atomic/run/big.bin", "atomic/run/stats.json"]


def test_object_lock_refuses_a_second_writer_naming_the_holder(s3) -> None:  # noqa: F811
    run = f"{s3.make_bucket('locked')}/run"
    first = acquire_output_lock(run, "pipelines.run")
    assert isinstance(first, ObjectLock)
    holder = json.loads(fsspec.filesystem("s3").cat("locked/run/.lock"))
    assert {"host", "pid", "command", "heartbeat_at", "token"} <= set(holder)
    with pytest.raises(FolderLocked) as refused:
        acquire_output_lock(run, "pipelines.run")
    message = str(refused.value)
    assert "\n" not in message and f"pid {holder['pid']}" in message and "heartbeat" in message
    first.release()
    assert not fsspec.filesystem("s3").exists("locked/run/.lock")
    acquire_output_lock(run).release()  # free again


def test_stale_lock_is_reported_with_its_age_and_can_be_broken(s3) -> None:  # noqa: F811
    run = f"{s3.make_bucket('stale')}/run"
    dead = {"token": "x", "host": "node-7", "pid": 4242, "command": "python -m pipelines.run",
            "started_at": 0, "heartbeat_at": time.time() - STALE_AFTER_S - 60}  # fmt: skip
    fsspec.filesystem("s3").pipe_file("stale/run/.lock", json.dumps(dead).encode())
    with pytest.raises(FolderLocked, match=r"stale lock \(node-7 pid 4242.*last heartbeat 3\d\d s ago.*--break"):
        acquire_output_lock(run)
    assert break_lock(run)
    acquire_output_lock(run).release()


def test_a_planted_lock_with_an_impossible_pid_is_judged_by_its_heartbeat(s3) -> None:  # noqa: F811
    """A record naming this host and a pid beyond a C long: os.kill's OverflowError was a traceback."""
    run = f"{s3.make_bucket('bigpid')}/run"
    planted = {"host": socket.gethostname(), "pid": 2**70, "heartbeat_at": time.time() - STALE_AFTER_S - 60}
    fsspec.filesystem("s3").pipe_file("bigpid/run/.lock", json.dumps(planted).encode())
    with pytest.raises(FolderLocked, match=r"stale lock \(.* pid 1180591620717411303424"):
        acquire_output_lock(run)


def test_a_lock_whose_holder_died_on_this_host_is_taken_over(s3) -> None:  # noqa: F811
    run = f"{s3.make_bucket('takeover')}/run"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = {"token": "old", "host": socket.gethostname(), "pid": dead.pid, "command": "killed",
              "started_at": 0, "heartbeat_at": time.time()}  # fmt: skip
    fsspec.filesystem("s3").pipe_file("takeover/run/.lock", json.dumps(holder).encode())
    lock = acquire_output_lock(run)
    assert json.loads(fsspec.filesystem("s3").cat("takeover/run/.lock"))["pid"] == os.getpid()
    lock.release()


def test_heartbeat_rewrites_the_lock(s3) -> None:  # noqa: F811
    run = f"{s3.make_bucket('beat')}/run"
    lock = ObjectLock(run, heartbeat_s=0.2).acquire()
    fs = fsspec.filesystem("s3")
    first = json.loads(fs.cat("beat/run/.lock"))["heartbeat_at"]
    deadline = time.monotonic() + 60  # a rewrite is awaited, not timed: a loaded machine may delay a beat
    while json.loads(fs.cat("beat/run/.lock"))["heartbeat_at"] == first and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(fs.cat("beat/run/.lock"))["heartbeat_at"] > first
    lock.release()


def test_a_store_gone_at_release_leaves_the_lock_to_go_stale_in_one_warning(
    s3,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run ending because its store went away must still end with its own one line: releasing its lock and
    read lease there fails, which is a warning each (what is left, when it goes stale), not a traceback."""
    run, mix = f"{s3.make_bucket('gone')}/run", "s3://gone/mix"
    with HoldingProxy(s3.port, rb"never matched", let_through=0) as proxy:  # a way to the store, then none
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the connection refused at once, not after retries
        clear_clients()
        lock, lease = acquire_output_lock(run), acquire_read_lock(mix, "training run")
        proxy.stop()
        lock.release()
        lease.release()  # type: ignore[union-attr]
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and said[0].startswith("warning: could not remove s3://gone/run/.lock ("), said
    assert said[0].endswith("stale after 300 s (then `python -m common.object_lock --break s3://gone/run`)")
    assert said[1].startswith("warning: could not remove s3://gone/mix/.readers/"), said
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    clear_clients()
    left = sorted(fsspec.filesystem("s3").find("gone"))
    assert [path.rsplit("/", 1)[0] for path in left] == ["gone/mix/.readers", "gone/run"] and left[1].endswith("/.lock")


def test_a_read_lease_refuses_writers_naming_the_reader(s3, tmp_path: Path) -> None:  # noqa: F811
    """The store's twin of the local read lock: a training run's lease on its --shards makes a writer's lock
    on them (an --overwrite) refused in one line naming the reader; a reader is refused while a writer holds."""
    mix = f"{s3.make_bucket('leased')}/mix"
    fs = fsspec.filesystem("s3")
    fs.pipe_file("leased/mix/manifest.json", b"{}")
    first, second = acquire_read_lock(mix, "training run"), acquire_read_lock(mix, "training run")
    assert first is not None and second is not None  # two runs may train on one mixture
    lease = json.loads(fs.cat(first.key))
    assert first.key.startswith("leased/mix/.readers/") and {"host", "pid", "command", "heartbeat_at"} <= set(lease)
    with pytest.raises(FolderLocked) as refused:
        acquire_output_lock(mix, "mixture build")
    message = str(refused.value)
    assert "\n" not in message and "being read by a training run" in message and f"pid {os.getpid()}" in message
    assert not fs.exists("leased/mix/.lock")  # the refused writer took its lock object back
    assert download_folder(mix, tmp_path / "copy") == ["manifest.json"]  # who reads it is not its data
    first.release()
    with pytest.raises(FolderLocked, match="being read by a training run"):
        acquire_output_lock(mix, "mixture build")
    second.release()
    assert fs.find("leased/mix") == ["leased/mix/manifest.json"]  # the leases went with their readers
    with ObjectLock(mix, "mixture build"):
        with pytest.raises(FolderLocked, match=r"being written by a mixture build \(.* pid \d+"):
            acquire_read_lock(mix, "training run")
    assert fs.find("leased/mix") == ["leased/mix/manifest.json"]


def test_a_stale_read_lease_is_reported_with_its_age_and_can_be_broken(s3, capsys) -> None:  # noqa: F811
    mix = f"{s3.make_bucket('stale-lease')}/mix"
    fs = fsspec.filesystem("s3")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead_here = {"host": socket.gethostname(), "pid": gone.pid, "command": "killed", "heartbeat_at": time.time()}
    fs.pipe_file("stale-lease/mix/.readers/here.json", json.dumps(dead_here).encode())  # known dead: dropped
    acquire_output_lock(mix).release()
    assert not fs.exists("stale-lease/mix/.readers/here.json")
    old = {"host": "node-7", "pid": 4242, "command": "python -m trainer.fsdp_train", "what": "training run",
           "heartbeat_at": time.time() - STALE_AFTER_S - 60}  # fmt: skip
    fs.pipe_file("stale-lease/mix/.readers/old.json", json.dumps(old).encode())
    pattern = r"stale read lease \(node-7 pid 4242.*last heartbeat 3\d\d s ago.*--break s3://stale-lease/mix"
    with pytest.raises(FolderLocked, match=pattern):
        acquire_output_lock(mix)
    assert main(["--break", mix]) == 0
    assert "broke 1 lock object(s) of s3://stale-lease/mix" in capsys.readouterr().out
    acquire_output_lock(mix).release()


def test_read_only_bucket_is_one_line(s3) -> None:  # noqa: F811
    import boto3

    s3.make_bucket("readonly")
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::readonly/*"}
    policy = {"Version": "2012-10-17", "Statement": [deny]}
    boto3.client("s3", endpoint_url=s3.endpoint).put_bucket_policy(Bucket="readonly", Policy=json.dumps(policy))
    with pytest.raises(FolderUnavailable, match="s3://readonly/run: cannot write there"):
        acquire_output_lock("s3://readonly/run")
    assert acquire_read_lock("s3://readonly/mix", "training run") is None  # read on, unleased (as a local reader)


def test_local_paths_keep_the_flock(tmp_path: Path) -> None:
    lock = acquire_output_lock(tmp_path / "run")
    assert isinstance(lock, FolderLock)
    lock.release()
