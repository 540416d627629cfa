"""``--executor ray`` on a real Ray head (127.0.0.1): same output as local, survives kills, resumes.

One head (``ray start --head --num-cpus 2 --block``) serves the whole module and is stopped in teardown
(its own processes only, by pid: ``ray stop`` would stop every Ray cluster on the machine). It runs
with token authentication (Ray 2.60's default for new local clusters) and a token of its own, given to
every client by ``RAY_AUTH_TOKEN_PATH`` only: the drivers must turn token mode on themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from common.lock import LOCK_NAME
from common.ray_cluster.auth import MODE_VAR, TOKEN_PATH_VAR, TOKEN_VAR, enable_token_mode
from common.ray_cluster.executor import GIB, RayResourceError, fit_resources
from tests.support.cli import REPO, run_cli
from tests.support.mirror import write_mirror
from tests.support.processes import alive, descendants, wait_gone
from tests.support.run_compare import assert_same_run
from tests.support.star_runs import LABELS

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(RAY is None, reason="ray is not installed")]
CRAWL = "CC-MAIN-2024-18"
N_WARCS = 4  # 12 documents each; the interrupted run needs tasks left after the first one finishes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[str]:
    """A real single-node Ray cluster with token auth on a free local port; its address.

    Clients find the token through ``RAY_AUTH_TOKEN_PATH`` (set for the module); ``RAY_AUTH_MODE`` is
    left unset for them, as on a user's machine.
    """
    port = _free_port()
    temp = tmp_path_factory.mktemp("ray")
    token = temp / "auth_token"
    token.write_text(uuid.uuid4().hex)
    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", MODE_VAR, TOKEN_VAR, TOKEN_PATH_VAR)}
    for key in (MODE_VAR, TOKEN_VAR):
        os.environ.pop(key, None)
    os.environ[TOKEN_PATH_VAR] = str(token)
    env = {**os.environ, "PYTHONPATH": str(REPO), MODE_VAR: "token"}
    cmd = [RAY, "start", "--head", "--block", "--num-cpus", "2", "--port", str(port), "--node-ip-address", "127.0.0.1"]
    cmd += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    head = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    started: set[int] = set()
    try:
        _wait_until_up(address, env, head)
        started = descendants(head.pid)  # GCS, raylet, agents: they outlive `ray start --block` if it exits first
        os.environ["RAY_ADDRESS"] = address
        yield address
    finally:
        _stop(head, started)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wait_until_up(address: str, env: dict[str, str], head: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and head.poll() is None:
        status = subprocess.run([RAY, "status", "--address", address], env=env, capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        if status.returncode == 0 and "CPU" in status.stdout:  # up, and its resources reported
            return
        time.sleep(1)
    raise RuntimeError(f"the Ray head at {address} did not come up (exit code {head.poll()})")


def _stop(head: subprocess.Popen, started: set[int]) -> None:
    """This head's processes (``ray start --block``, what it started, what runs under it now), by pid:
    TERM, then KILL."""
    tree = started | descendants(head.pid) | {head.pid}
    for sig, pids in ((signal.SIGTERM, alive(tree)), (signal.SIGKILL, wait_gone(tree, timeout=15))):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    head.wait(timeout=30)


def _driver(code: str, env: dict[str, str]) -> list[str]:
    """``code`` in a fresh driver process after ``connect`` (common/ray_cluster/executor.py); its stdout lines."""
    proc = subprocess.run([sys.executable, "-c", "from common.ray_cluster.executor import connect\n" + code],
                          cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_without_an_address_the_driver_starts_a_private_loopback_instance_beside_a_running_cluster(
    ray_head: str,
) -> None:
    """A cluster runs on this machine (the test's head) and no address is given: ``connect()`` does not join it
    (as ``--help`` says) but starts an instance of its own, says where in one line, and that instance's GCS,
    raylet, agents, dashboard and autoscaler metrics endpoints all listen on 127.0.0.1, none elsewhere."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    script = (
        "import os, json, subprocess\n"
        "from tests.support.processes import descendants\n"
        f"connect(None) if {str(temp)!r} else None\n"
        "import ray; ray.get(ray.remote(lambda: 1).remote())\n"
        "pids = descendants(os.getpid())\n"
        "out = subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True).stdout\n"
        "print(json.dumps([l.split()[3] for l in out.splitlines() if any(f'pid={p},' in l for p in pids)]))\n"
        "print(len(ray.nodes()))\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(temp)
    try:
        said, listening, nodes = _driver(script, env)[-3:]
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert re.fullmatch(r"ray: started a private Ray instance \(127\.0\.0\.1 only, stopped with this run\) at "
                        r"127\.0\.0\.1:\d+", said), said  # fmt: skip
    assert not said.endswith(":" + ray_head.rsplit(":", 1)[1]) and nodes == "1"  # its own, not the running cluster
    print(said)
    listening = json.loads(listening)
    print(f"{len(listening)} listening sockets: {sorted(listening)}")
    assert len(listening) >= 5  # GCS, raylet (2), agents, metrics
    hosts = {address.rsplit(":", 1)[0] for address in listening}
    assert hosts <= {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}, hosts


@pytest.mark.parametrize("how", ["RAY_ADDRESS", "--ray-address"])
def test_a_named_cluster_is_joined_and_named(ray_head: str, how: str) -> None:
    env = dict(os.environ)
    if how == "RAY_ADDRESS":
        code = "connect(None)"
    else:
        env.pop("RAY_ADDRESS")
        code = f"connect({ray_head!r})"
    said = _driver(code + "; import ray; ray.shutdown()", env)[-1]
    port = ray_head.rsplit(":", 1)[1]  # the head's GCS says its own node address (Ray's routable one)
    assert re.fullmatch(rf"ray: joined the Ray cluster at [0-9.]+:{port}", said), said


def _docs(folder: Path, tasks: int | None = None) -> dict[str, list[tuple[str, str]]]:
    """dump -> sorted (id, text) of every parquet file in ``folder`` (of the first ``tasks`` tasks' files)."""
    out: dict[str, list[tuple[str, str]]] = {}
    files = sorted(folder.glob("*.parquet"))
    for file in files if tasks is None else [f for f in files if int(f.stem) < tasks]:
        for row in pq.read_table(file, columns=["id", "text", "dump"]).to_pylist():
            out.setdefault(row["dump"], []).append((row["id"], row["text"]))
    return {dump: sorted(rows) for dump, rows in out.items()}


def _ids(folder: Path) -> list[str]:
    return [doc_id for rows in _docs(folder).values() for doc_id, _ in rows]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[list[str], Path]:
    """``N_WARCS`` small WARC files and their run curated by the local executor (the reference)."""
    base = tmp_path_factory.mktemp("mirror")
    write_mirror(base / "cc", CRAWL, N_WARCS)
    warcs = sorted(str(p) for p in (base / "cc").rglob("*.warc.gz"))
    run_cli("pipelines.run", *warcs, "--workers", "2", "--no-dedup", "--out", str(base / "local"))
    return warcs, base / "local" / CRAWL / "curated"


@pytest.fixture(scope="module")
def sample_runs(ray_head: str, local_sample_without_dedup: Path, tmp_path_factory) -> tuple[Path, Path, str]:
    """The ``sample`` source curated locally and on Ray: (local run dir, Ray run dir, the Ray driver's stdout)."""
    out = tmp_path_factory.mktemp("sample")
    proc = run_cli(
        "pipelines.run", "sample", "--executor", "ray", "--ray-address", ray_head, "--no-dedup", "--out",
        str(out / "ray"),
    )  # fmt: skip
    return local_sample_without_dedup, out / "ray" / "sample", proc.stdout


def test_sample_on_ray_equals_local(sample_runs: tuple[Path, Path, str]) -> None:
    local_dir, run_dir, stdout = sample_runs
    assert_same_run(str(run_dir), local_dir, folders=("curated", "removed"))
    assert (run_dir / "completions/curate/00000").exists()
    assert (run_dir / "stats/curate/00000.json").exists() and (run_dir / "logs/curate/task_00000.log").exists()
    assert "[ray] curate: 1/1 tasks" in stdout
    assert (run_dir / "stats.json").exists()


def test_a_star_file_cut_short_after_its_receipt_is_redone_on_ray(
    ray_head: str,
    resume_cut: Callable[..., subprocess.CompletedProcess],
) -> None:
    """``pipelines.run sample --cluster-tasks 2`` stopped after its number stage, one of that stage's label files
    cut short after its task's receipt (``tests/support/star_runs.py``), resumed with ``--executor ray``: with the
    task's inputs gone, one error line naming the file before any Ray task; with them back, that task alone runs
    again on Ray (the stage sent again) and the run equals the uninterrupted one."""
    proc = resume_cut("--executor", "ray", "--ray-address", ray_head)
    assert proc.stdout.count(f"[ray] {LABELS.stage}: 2/2 tasks") == 2, proc.stdout[-3000:]


def _chain(run_dir: Path, ray_address: str | None) -> str:
    """Tokenizer + mixture (no training) for ``run_dir``, locally or on Ray, in a fresh driver; its stdout."""
    ray = f"RayOptions({ray_address!r})" if ray_address else "None"
    code = (
        "from pathlib import Path; from pipelines.chain import run_chain; "
        "from pipelines.ray_cluster.chain import RayOptions; "
        f"run_chain(Path({str(run_dir)!r}), ray={ray}, train=False)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def _files(folder: Path) -> dict[str, bytes]:
    """A build's output files; the folder's lock file records its last writer's pid, which is not output."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != LOCK_NAME}


def test_tokenizer_and_mixture_on_ray_equal_local(
    ray_head: str, sample_runs: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """Same run directory, chain run locally then on Ray: tokenizer.json, every shard file and manifest.json equal."""
    run_dir = sample_runs[1]
    _chain(run_dir, None)
    local = tmp_path / "local-chain"
    local.mkdir()
    for name in ("tokenizer", "mixture"):
        shutil.move(run_dir / name, local / name)
    out = _chain(run_dir, ray_head)
    assert re.search(r"\[ray\] tokenizer: 1/1 tasks, \d+ documents", out), out
    assert re.search(r"\[ray\] mixture tokenizing: (\d+)/\1 tasks", out), out
    assert re.search(r"\[ray\] mixture writing shards: (\d+)/\1 tasks", out), out
    tok = "tokenizer.json"
    assert (run_dir / "tokenizer" / tok).read_bytes() == (local / "tokenizer" / tok).read_bytes()
    on_ray, expected = _files(run_dir / "mixture"), _files(local / "mixture")
    assert "manifest.json" in expected and any(name.endswith(".ds") for name in expected)
    assert on_ray == expected


def test_ray_status_against_the_head_with_the_documented_environment(ray_head: str) -> None:
    """``ray status --address`` works with ``RAY_AUTH_MODE=token`` plus the token; without the mode it is refused."""
    env = {**os.environ}
    env.pop(MODE_VAR, None)
    status_cmd = [RAY, "status", "--address", ray_head]
    refused = subprocess.run(status_cmd, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "InvalidAuthToken" in refused.stdout + refused.stderr
    assert enable_token_mode(env) and env[MODE_VAR] == "token"
    status = subprocess.run(status_cmd, env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"\b2\.0 CPU\b|0\.0/2\.0 CPU", status.stdout), status.stdout


def test_memory_no_node_has_is_a_quick_one_line_error(ray_head: str, tmp_path: Path) -> None:
    start = time.time()
    proc = run_cli(
        "pipelines.run", "sample", "--executor", "ray", "--ray-address", ray_head, "--ray-memory-per-task", "10000",
        "--no-dedup", "--out", str(tmp_path), check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: a task asks 1 CPU and 10000\.00 GB of Ray memory, but no node has that "
                        r"\(largest: 2 CPU, [\d.]+ GB\); .*wait forever.*", last), last  # fmt: skip
    assert time.time() - start < 90
    assert not (tmp_path / "sample" / "completions" / "curate").exists() or not list(
        (tmp_path / "sample" / "completions" / "curate").iterdir()
    )


def test_token_mode_turns_on_only_with_a_token_and_no_explicit_mode(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    env = {TOKEN_PATH_VAR: str(token)}
    assert enable_token_mode(env) and env[MODE_VAR] == "token"
    env = {TOKEN_PATH_VAR: str(token), MODE_VAR: "disabled"}
    assert not enable_token_mode(env) and env[MODE_VAR] == "disabled"
    env = {TOKEN_PATH_VAR: str(tmp_path / "missing")}
    assert not enable_token_mode(env) and MODE_VAR not in env
    env = {TOKEN_VAR: "abc", TOKEN_PATH_VAR: str(tmp_path / "missing")}
    assert enable_token_mode(env)


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


def _interruptible() -> None:
    """SIGINT back to its default in the driver: a test run started in the background (`cmd &`, nohup) ignores
    it, the ignore is inherited across exec, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """The driver in its own session, its output to ``log`` (a pipe nobody reads could fill and block it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, preexec_fn=_interruptible,
        )  # fmt: skip


def test_sigkilled_ray_worker_loses_and_duplicates_nothing(ray_head: str, mirror, tmp_path: Path) -> None:
    warcs, reference = mirror
    warcs, n = warcs[:3], 3  # two in flight, one queued: enough to kill one mid-task
    args = ["pipelines.run", *warcs, "--executor", "ray", "--ray-address", ray_head, "--workers", "2"]
    log = tmp_path / "driver.log"
    proc = _start([*args, "--no-dedup", "--out", str(tmp_path / "run")], log)
    completions = tmp_path / "run" / CRAWL / "completions" / "curate"
    killed = None
    deadline = time.time() + 150
    while killed is None and time.time() < deadline and proc.poll() is None:
        workers = _rank_workers()
        # an actor whose pool child exists is running a task (datatrove runs it in that child)
        actors = [ppid for _, ppid in workers if ppid in {pid for pid, _ in workers}]
        if actors and len(list(completions.glob("*"))) < n:
            os.kill(actors[0], signal.SIGKILL)
            killed = actors[0]
        time.sleep(0.05)
    assert killed is not None, "no Ray worker was seen running a task"
    proc.wait(timeout=240)
    assert proc.returncode == 0, log.read_text()[-3000:]
    resumed = _ids(tmp_path / "run" / CRAWL / "curated")
    assert len(resumed) == len(set(resumed)) == 12 * n
    assert _docs(tmp_path / "run" / CRAWL / "curated") == _docs(reference, tasks=n)


def test_interrupted_driver_resumes_with_the_same_output(ray_head: str, mirror, tmp_path: Path) -> None:
    warcs, reference = mirror
    # one task in flight and N_WARCS >= 4: interrupted as soon as the first task completes, at most the task
    # in flight can still finish before the driver is gone, so at least two tasks remain for the rerun
    args = ["pipelines.run", *warcs, "--executor", "ray", "--ray-address", ray_head, "--workers", "1", "--no-dedup"]
    out, log = tmp_path / "run", tmp_path / "driver.log"
    proc = _start([*args, "--out", str(out)], log)
    completions = out / CRAWL / "completions" / "curate"
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
    assert 1 <= done < N_WARCS, f"the run was not interrupted mid-way ({done} done):\n{log.read_text()[-3000:]}"
    rerun = run_cli(*args, "--out", str(out))
    resumed = re.search(r"Will run pipeline on (\d+) incomplete ranks", rerun.stdout + rerun.stderr)
    assert resumed and int(resumed.group(1)) <= N_WARCS - done, "finished tasks were not skipped"
    assert _docs(out / CRAWL / "curated") == _docs(reference)
