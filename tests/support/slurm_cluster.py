"""A real single-node Slurm cluster on this machine (Debian's ``slurm-wlm`` and ``munge``), for tests.

``slurm_cluster(folder)`` writes a minimal ``slurm.conf`` (one node ``localhost`` on 127.0.0.1 with 2 CPUs,
one partition ``debug``, free ports, every state, spool, pid and log file under ``folder``), a munge key,
starts ``munged``, ``slurmctld`` and ``slurmd`` as root, waits until ``sinfo`` shows the node idle, and on
exit stops exactly the processes it started (their pids, then whatever job steps ``slurmd`` left).
Clients find the cluster through ``SLURM_CONF`` (set in ``os.environ`` while the cluster is up).
``SlurmUnavailable`` says why a cluster could not start: the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import alive, descendants, wait_gone

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "scontrol", "srun")
PARTITION = "debug"
SHORT = "short"  # a 5-minute limit, for the checks against a partition's limit
CPUS = 2


class SlurmUnavailable(RuntimeError):
    """The packages are missing, or the daemons did not come up: the reason, for ``pytest.skip``."""


@dataclass(frozen=True)
class SlurmCluster:
    """A running test cluster: its configuration file and its folder of state and logs."""

    conf: Path
    folder: Path
    partition: str = PARTITION

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (output captured, not checked)."""
        return subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=timeout)

    def queue(self) -> list[tuple[str, str]]:
        """(job id, state) of every job in the queue, array tasks as ``JOB_TASK``."""
        out = self.run("squeue", "-h", "-r", "-o", "%i %T").stdout
        return [tuple(line.split()[:2]) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def wait_idle(self, timeout: float = 120) -> None:
        """Until the queue is empty (the jobs a test left have ended)."""
        deadline = time.monotonic() + timeout
        while self.queue() and time.monotonic() < deadline:
            time.sleep(0.5)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def write_conf(folder: Path, munge_socket: Path) -> Path:
    """``slurm.conf`` for one node of ``CPUS`` CPUs on 127.0.0.1, no cgroups, no accounting."""
    ctld_port, slurmd_port = _free_ports(2)
    (folder / "ctld").mkdir()
    (folder / "spool").mkdir()
    lines = [
        "ClusterName=cc2modeltest",
        "SlurmctldHost=localhost(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'ctld'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "MinJobAge=30",
        "KillWait=5",
        f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=8000 State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName={SHORT} Nodes=localhost MaxTime=5 State=UP",
    ]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _start_munge(folder: Path) -> tuple[subprocess.Popen, Path]:
    key, socket_path = folder / "munge.key", folder / "munge.socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cmd = ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={socket_path}",
           f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
           f"--seed-file={folder / 'munged.seed'}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait(lambda: socket_path.exists(), proc, "munged", folder / "munged.log", 20)
    return proc, socket_path


def _wait(ready, proc: subprocess.Popen, name: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    raise SlurmUnavailable(f"{name} did not start (exit {proc.poll()}): {' | '.join(tail) or 'no log'}")


def _node_idle(cluster: SlurmCluster) -> bool:
    try:
        out = cluster.run("sinfo", "-h", "-N", "-o", "%t", timeout=10).stdout.split()
    except subprocess.TimeoutExpired:
        return False
    return bool(out) and set(out) == {"idle"}  # one line per partition the node is in


def _stop(procs: list[subprocess.Popen]) -> None:
    """TERM, then KILL, to the daemons started here and the job steps under them (by pid)."""
    tree = {p.pid for p in procs}
    for proc in procs:
        tree |= descendants(proc.pid)
    for sig, pids in ((signal.SIGTERM, alive(tree)), (signal.SIGKILL, wait_gone(tree, timeout=5))):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@contextlib.contextmanager
def slurm_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """Start the cluster in ``folder`` (short path: munge's socket path must fit 107 bytes); stop it on exit."""
    missing = [cmd for cmd in (*DAEMONS, *CLIENTS) if shutil.which(cmd) is None]
    if missing:
        raise SlurmUnavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster's daemons run as root; this is not root")
    procs: list[subprocess.Popen] = []
    saved = os.environ.get("SLURM_CONF")
    try:
        munge, socket_path = _start_munge(folder)
        procs.append(munge)
        conf = write_conf(folder, socket_path)
        cluster = SlurmCluster(conf, folder)
        for name, log in (("slurmctld", "slurmctld.log"), ("slurmd", "slurmd.log")):
            cmd = [name, "-D", "-f", str(conf)] + (["-i"] if name == "slurmctld" else ["-N", "localhost"])
            with open(folder / f"{name}.out", "w") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            time.sleep(1)
            if procs[-1].poll() is not None:
                _wait(lambda: False, procs[-1], name, folder / log, 0)
        _wait(lambda: _node_idle(cluster), procs[-1], "slurmd (node idle in sinfo)", folder / "slurmd.log", 60)
        os.environ["SLURM_CONF"] = str(conf)
        yield cluster
    finally:
        _stop(procs)
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


def cluster_or_skip() -> Iterator[SlurmCluster]:
    """For a module fixture (``yield from``): a cluster in a short folder under /tmp, or the test skipped
    with the reason it could not start."""
    folder = Path(tempfile.mkdtemp(prefix="slurm", dir="/tmp"))  # short: munge's socket path
    try:
        with slurm_cluster(folder) as cluster:
            yield cluster
    except SlurmUnavailable as err:
        pytest.skip(f"no test Slurm cluster: {err}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
