"""An S3-compatible server on 127.0.0.1 for tests: moto's S3 service, reached by the real s3fs / botocore.

``S3Server`` starts moto's S3 app in a server process of its own on a free port (as s3fs's own tests start
``python -m moto.server``; ``tests/support/moto_s3_server.py`` says why not that one: it closes every
connection and dispatches among all of moto's services), waits until it answers, and stops exactly that
process by its pid. ``env`` is what a client needs (``AWS_ENDPOINT_URL`` and dummy
credentials); ``use()`` puts it into this process's environment and drops s3fs's cached clients, so the
code under test talks to this server through its ordinary configuration, as it would to AWS.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import REPO

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# variables that would send the client elsewhere than this server
FOREIGN = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """moto's S3 server in a child process on 127.0.0.1."""

    def __init__(self, log: Path | None = None) -> None:
        """``log``: a file for the server's request log (one line per request: what ``bench.object_store``
        counts); default: discarded."""
        self.log = log
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS}

    def start(self, timeout: float = 30.0) -> S3Server:
        command = [sys.executable, "-m", "tests.support.moto_s3_server", "-H", "127.0.0.1", "-p", str(self.port)]
        sink = self.log.open("ab") if self.log is not None else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=sink)
        finally:
            if self.log is not None:
                sink.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"S3 server exited with {self.process.returncode}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"S3 server did not answer on {self.endpoint} in {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset API), between tests sharing one server."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=5).close()

    @contextlib.contextmanager
    def use(self) -> Iterator[S3Server]:
        """This process's AWS variables point at the server for the block (restored after)."""
        saved = {k: os.environ.get(k) for k in (*self.env, *FOREIGN)}
        for key in FOREIGN:
            os.environ.pop(key, None)
        os.environ.update(self.env)
        clear_clients()
        try:
            yield self
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            clear_clients()

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (through s3fs); its URL."""
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
        return f"s3://{name}"


def clear_clients() -> None:
    """s3fs caches file systems (and their endpoint) per process and per class (s3fs's own, and the one
    ``s3://`` opens: ``common/s3_store.py``): a new endpoint needs new ones."""
    import fsspec
    import s3fs

    from common.s3_store import reset_shared_session

    s3fs.S3FileSystem.clear_instance_cache()
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    reset_shared_session()


def subprocess_env(server: S3Server, **extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess that should reach ``server``."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    return {**env, **server.env, **extra}


@pytest.fixture(scope="session")
def s3_server_session() -> Iterator[S3Server]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    pytest.importorskip("waitress")
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server_session: S3Server) -> Iterator[S3Server]:
    """The session's S3 server, emptied, with this process's environment pointing at it."""
    s3_server_session.reset()
    with s3_server_session.use() as server:
        yield server
