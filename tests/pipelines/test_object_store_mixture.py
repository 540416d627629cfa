"""The chain's mixture step on a store run (``pipelines/chain_store.py``) against a real S3 server (moto on
127.0.0.1, real s3fs): the shards go up while they are written and ``manifest.json`` last, once they all
landed, so a build killed at any upload leaves no manifest naming a missing shard (killed at the manifest's:
every shard, no manifest), and the rerun gives what an uninterrupted build gives, byte for byte."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest

from common.storage import as_path
from common.transfer import upload_folder
from mixtures.build import build_mixture
from mixtures.writer import shard_file_names
from pipelines.chain import ChainConfig, mixture_spec, run_chain
from tests.support.cli import REPO
from tests.support.holding_proxy import HoldingProxy
from tests.support.s3_server import s3, s3_server_session, subprocess_env  # noqa: F401
from tests.support.text_corpora import web_documents, write_parquet

TOKENS_PER_FILE = 4_000  # several shards from 60 pages
CHAIN_WITHOUT_TRAINING = (
    "import sys; from common.storage import as_path; from pipelines.chain import ChainConfig, run_chain; "
    "run_chain(as_path(sys.argv[1]), ChainConfig(tokens_per_file=int(sys.argv[2])), train=False)"
)


@pytest.fixture
def store_run(s3, tok4k: Path, tmp_path: Path) -> tuple[str, Path]:  # noqa: F811
    """A run directory in a bucket as curation and the chain's tokenizer step leave it (kept documents in
    ``curated/``, ``tokenizer/``); and a local folder named like the run holding the same documents."""
    bucket = s3.make_bucket("mix")
    local = tmp_path / "sample"  # the run's name: the mixture's source name
    write_parquet(web_documents()[:60], local / "curated", n_files=2)
    run = f"{bucket}/run/sample"
    upload_folder(local / "curated", f"{run}/curated")
    upload_folder(tok4k, f"{run}/tokenizer", last="tokenizer.json")
    return run, local


def killed_at_upload(s3, run: str, name: str) -> None:  # noqa: F811
    """The chain's mixture step for `run`, in a process SIGKILLed while its first upload of a key under
    ``mixture/`` starting with `name` is held in flight by a HoldingProxy (a fixed point: the server never sees
    it, nor any later upload of such a key)."""
    key = run[len("s3://") :]
    pattern = rb"PUT /" + re.escape(f"{key}/mixture/{name}".encode())
    with HoldingProxy(s3.port, pattern, let_through=0) as proxy:
        env = subprocess_env(s3, PYTHONPATH=str(REPO), AWS_ENDPOINT_URL=proxy.endpoint)
        command = [sys.executable, "-c", CHAIN_WITHOUT_TRAINING, run, str(TOKENS_PER_FILE)]
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 120
        try:
            while not proxy.held.wait(0.1):
                assert proc.poll() is None, f"the build ended before its upload was held: {proc.stderr.read()}"
                assert time.monotonic() < deadline, f"no upload of {name} reached the proxy in 120 s"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stderr.close()


@pytest.mark.parametrize("held", ["shard_", "manifest.json"])
def test_a_mixture_build_killed_mid_upload_leaves_no_manifest_and_the_rerun_matches(
    held: str,
    store_run: tuple[str, Path],
    s3,  # noqa: F811
    tok4k: Path,
    tmp_path: Path,
) -> None:
    run, local = store_run
    config = ChainConfig(tokens_per_file=TOKENS_PER_FILE)
    reference = build_mixture(mixture_spec(local, tok4k, config), tmp_path / "reference", progress=False)
    assert len(reference.files) >= 3
    shard_files = {name for shard in reference.files for name in shard_file_names(shard.path)}

    killed_at_upload(s3, run, held)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    prefix = f"{run[len('s3://') :]}/mixture/"
    landed = {p[len(prefix) :] for p in fs.find(prefix)}
    # no manifest (nor lock, build state or temp object); killed at the manifest, every shard it names is
    # already whole on the store: the commit comes after them all
    assert landed < shard_files if held == "shard_" else landed == shard_files

    run_chain(as_path(run), config, train=False)  # the rerun: the mixture built again, manifest last
    stored = json.loads(fs.cat_file(f"{prefix}manifest.json"))
    assert stored["files"] == json.loads((tmp_path / "reference" / "manifest.json").read_text())["files"]
    assert {p[len(prefix) :] for p in fs.find(prefix)} == shard_files | {"manifest.json"}
    for name in sorted(shard_files):
        ours, theirs = fs.cat_file(prefix + name), (tmp_path / "reference" / name).read_bytes()
        if name.endswith(".metadata"):  # "<tokenizer path>|<token size>": the staging's path, not the reference's
            ours, theirs = ours.split(b"|", 1)[1], theirs.split(b"|", 1)[1]
        assert ours == theirs, name
