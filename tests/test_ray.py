"""``--executor ray`` on a real Ray head (127.0.0.1): same output as local, survives kills, resumes.

One head (``ray start --head --num-cpus 2``) serves the whole module and is stopped in teardown.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.ray_executor import GIB, RayResourceError, fit_resources
from tests.conftest import REPO, run_cli
from tests.test_cli import _write_mirror

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
pytestmark = pytest.mark.skipif(RAY is None, reason="ray is not installed")
CRAWL = "CC-MAIN-2024-18"
N_WARCS = 3  # 12 documents each


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[str]:
    """A real single-node Ray cluster on a free local port; its address."""
    port = _free_port()
    temp = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [RAY, "start", "--head", "--num-cpus", "2", "--port", str(port), "--node-ip-address", "127.0.0.1"]
    cmd += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=120)
    address = f"127.0.0.1:{port}"
    old = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = address
    try:
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        if old is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = old


def _docs(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """dump -> sorted (id, text) of every parquet file in ``folder``."""
    out: dict[str, list[tuple[str, str]]] = {}
    for file in sorted(folder.glob("*.parquet")):
        for row in pq.read_table(file, columns=["id", "text", "dump"]).to_pylist():
            out.setdefault(row["dump"], []).append((row["id"], row["text"]))
    return {dump: sorted(rows) for dump, rows in out.items()}


def _ids(folder: Path) -> list[str]:
    return [doc_id for rows in _docs(folder).values() for doc_id, _ in rows]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[list[str], Path]:
    """Three small WARC files and their run curated by the local executor (the reference)."""
    base = tmp_path_factory.mktemp("mirror")
    _write_mirror(base / "cc", CRAWL, N_WARCS)
    warcs = sorted(str(p) for p in (base / "cc").rglob("*.warc.gz"))
    run_cli("pipelines.run", *warcs, "--workers", "2", "--no-dedup", "--out", str(base / "local"))
    return warcs, base / "local" / CRAWL / "curated"


def test_sample_on_ray_equals_local(ray_head: str, tmp_path: Path) -> None:
    run_cli("pipelines.run", "sample", "--no-dedup", "--out", str(tmp_path / "local"))
    proc = run_cli(
        "pipelines.run", "sample", "--executor", "ray", "--ray-address", ray_head, "--no-dedup", "--out",
        str(tmp_path / "ray"),
    )  # fmt: skip
    local, on_ray = _docs(tmp_path / "local/sample/curated"), _docs(tmp_path / "ray/sample/curated")
    assert local and on_ray == local
    run_dir = tmp_path / "ray/sample"
    assert (run_dir / "completions/curate/00000").exists()
    assert (run_dir / "stats/curate/00000.json").exists() and (run_dir / "logs/curate/task_00000.log").exists()
    assert "[ray] curate: 1/1 tasks" in proc.stdout
    assert (run_dir / "stats.json").exists()


def test_a_task_that_fits_nowhere_is_one_clear_error() -> None:
    nodes = [{"CPU": 2.0, "memory": 1.5 * GIB}]
    assert fit_resources(nodes) == pytest.approx(0.9 * 0.75)  # the default shrinks to fit the node
    with pytest.raises(RayResourceError, match=r"asks 1 CPU and 2\.00 GB.*largest: 2 CPU, 1\.50 GB.*wait forever"):
        fit_resources(nodes, mem_per_task_gb=2.0)
    with pytest.raises(RayResourceError, match="asks 4 CPU"):
        fit_resources(nodes, cpus_per_task=4)


def _rank_workers() -> list[tuple[int, int]]:
    """(pid, ppid) of processes titled like datatrove's Ray actor (the actor and its task's child)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"ray::RankWorker" in title:
            found.append((int(entry.name), ppid))
    return found


def _start(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def test_sigkilled_ray_worker_loses_and_duplicates_nothing(ray_head: str, mirror, tmp_path: Path) -> None:
    warcs, reference = mirror
    args = ["pipelines.run", *warcs, "--executor", "ray", "--ray-address", ray_head, "--workers", "2"]
    proc = _start([*args, "--no-dedup", "--out", str(tmp_path)])
    completions = tmp_path / CRAWL / "completions" / "curate"
    killed = None
    deadline = time.time() + 150
    while killed is None and time.time() < deadline and proc.poll() is None:
        workers = _rank_workers()
        # an actor whose pool child exists is running a task (datatrove runs it in that child)
        actors = [ppid for _, ppid in workers if ppid in {pid for pid, _ in workers}]
        if actors and len(list(completions.glob("*"))) < N_WARCS:
            os.kill(actors[0], signal.SIGKILL)
            killed = actors[0]
        time.sleep(0.05)
    assert killed is not None, "no Ray worker was seen running a task"
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    resumed = _ids(tmp_path / CRAWL / "curated")
    assert len(resumed) == len(set(resumed)) == len(_ids(reference)) == 12 * N_WARCS
    assert _docs(tmp_path / CRAWL / "curated") == _docs(reference)


@pytest.mark.xfail(reason="races on a quiet machine: the SIGINT can land after every task finished", strict=False)
def test_interrupted_driver_resumes_with_the_same_output(ray_head: str, mirror, tmp_path: Path) -> None:
    warcs, reference = mirror
    # one task in flight, so the interrupt lands between tasks and cannot race two concurrent ones to the end
    args = ["pipelines.run", *warcs, "--executor", "ray", "--ray-address", ray_head, "--workers", "1", "--no-dedup"]
    proc = _start([*args, "--out", str(tmp_path)])
    completions = tmp_path / CRAWL / "completions" / "curate"
    deadline = time.time() + 150
    while time.time() < deadline and len(list(completions.glob("*"))) < 1 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = len(list(completions.glob("*")))
    assert 1 <= done < N_WARCS, "the run was not interrupted mid-way"
    rerun = run_cli(*args, "--out", str(tmp_path))
    resumed = re.search(r"Will run pipeline on (\d+) incomplete ranks", rerun.stdout + rerun.stderr)
    assert resumed and int(resumed.group(1)) <= N_WARCS - done, "finished tasks were not skipped"
    assert _docs(tmp_path / CRAWL / "curated") == _docs(reference)
