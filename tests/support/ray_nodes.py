"""A real two-node Ray cluster on 127.0.0.1 for tests: a head and a worker, each a separate ``ray start`` node
process with its own ``--temp-dir`` and scratch (``TMPDIR``), token authentication with a token of its own;
stopped by pid at the end (``ray stop`` would stop every Ray cluster on the machine). ``held_task`` finds the
task that a FIFO of ``tests/support/fifo_holds.py`` holds, on either node: a kill at a point the test decides."""

from __future__ import annotations

import contextlib
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

from common.ray_cluster.auth import MODE_VAR, TOKEN_PATH_VAR, TOKEN_VAR
from tests.support.fifo_holds import waits_in_fifo_open
from tests.support.processes import alive, descendants, wait_gone
from tests.support.s3_server import free_port

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
NODE_ARGS = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
NODES = ("head", "worker")


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
    """These nodes' processes only, by pid: TERM, then KILL."""
    tree = started | {p for n in nodes for p in descendants(n.pid)} | {n.pid for n in nodes}
    for sig, pids in ((signal.SIGTERM, alive(tree)), (signal.SIGKILL, wait_gone(tree, timeout=15))):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    for node in nodes:
        node.wait(timeout=30)


@contextlib.contextmanager
def two_node_cluster(env: dict[str, str]) -> Iterator[dict]:
    """Head + worker (1 CPU each) started with ``env`` (plus token auth); yields the address, the environment a
    client needs (``RAY_ADDRESS`` unset) and the folders: ``head``/``worker`` (temp dirs), their scratch, and
    ``driver`` and ``caches``."""
    root = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    names = (*NODES, *(f"{n}-scratch" for n in NODES), "driver", "caches")
    folders = {n: root / n for n in names}
    for folder in folders.values():
        folder.mkdir()
    token = root / "token"
    token.write_text(uuid.uuid4().hex)
    address = f"127.0.0.1:{free_port()}"
    base = {k: v for k, v in env.items() if k not in ("RAY_ADDRESS", TOKEN_VAR)}
    base.update({MODE_VAR: "token", TOKEN_PATH_VAR: str(token)}, XDG_CACHE_HOME=str(folders["caches"]),
                MPLCONFIGDIR=str(folders["caches"] / "mpl"))  # fmt: skip
    head_args = ["--head", "--port", address.rsplit(":", 1)[1], "--include-dashboard=false"]
    nodes = [_start([*head_args, f"--temp-dir={folders['head']}", *NODE_ARGS],
                    {**base, "TMPDIR": str(folders["head-scratch"])})]  # fmt: skip
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


def python_workers(temp_dir: Path) -> int:
    """Python worker processes Ray started on the node whose temp dir this is (their core-worker logs)."""
    return len(list(temp_dir.glob("session_*/logs/python-core-worker-*.log")))


def held_task(folders: dict[str, Path], timeout: float = 240) -> tuple[int, int]:
    """(pid, Ray worker pid) of a task held by ``fifo_holds.hold_open``: a process of this cluster (by its
    ``TMPDIR``) waiting in the open of a FIFO for writing; its parent, the Ray worker (datatrove's ``RankWorker``
    actor), runs the task in it. The state lasts until the test kills the task: waiting for it catches no window."""
    scratch = {f"TMPDIR={folders[f'{node}-scratch']}".encode() for node in NODES}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if not waits_in_fifo_open(entry):
                    continue
                if not scratch & set((entry / "environ").read_bytes().split(b"\0")):
                    continue
                stat = (entry / "stat").read_text()
                parent = int(stat[stat.rindex(")") + 2 :].split()[1])
                if b"RankWorker" in Path(f"/proc/{parent}/cmdline").read_bytes():
                    return int(entry.name), parent
            except (OSError, ValueError):
                continue
        time.sleep(0.2)
    raise RuntimeError("no Ray task of this cluster was held in the open of a FIFO")
