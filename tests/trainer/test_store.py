"""The trainer on object storage (moto's S3 server on 127.0.0.1, real s3fs): shards and tokenizer read from a
bucket, checkpoints committed there by their checksum manifest, a run resumed from the bucket bit for bit the
uninterrupted one, a save killed mid-upload never resumed from, and bad stores refused in one line."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch

from common.object_lock import ObjectLock, acquire_read_lock
from mixtures.manifest import ManifestError
from mixtures.reader import ShardReader
from tests.support.cli import REPO
from tests.support.holding_proxy import HoldingProxy
from tests.support.processes import descendants, kill_all, wait_gone
from tests.support.s3_server import S3Server, free_port, s3, s3_server_session, subprocess_env  # noqa: F401
from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.data import WindowIndex
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig
from trainer.shard_store import StoreShardReader, StoreSource, stage_store_shards, store_source
from trainer.store import StoreCheckpoints

BUCKET = "trainer-store"


def _upload_inputs(server: S3Server, root: Path, n_docs: int = 60) -> tuple[Path, Path, str, str]:
    """Synthetic shards and tokenizer, locally and in the bucket: (local shards, local tokenizer, URLs)."""
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=n_docs, seq_len=32)
    server.make_bucket(BUCKET)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(str(shards) + "/", f"{BUCKET}/mix/", recursive=True)
    fs.put_file(str(tok), f"{BUCKET}/tok/tokenizer.json")
    return shards, tok, f"s3://{BUCKET}/mix", f"s3://{BUCKET}/tok/tokenizer.json"


def _cfg(shards: Path | str, tok: Path | str, out: Path | str, scratch: Path, **kw: object) -> TrainConfig:
    base = {"micro_batch": 4, "grad_accum": 2, "optim": OptimConfig(lr=3e-3), "log_every": 1, "checkpoint_every": 2,
            "val_holdout_files": 1, "val_batches": 2}  # fmt: skip
    return TrainConfig(shards=shards, tokenizer=tok, out=out, scratch=scratch, **{**base, **kw})  # type: ignore[arg-type]


def test_store_shards_are_read_by_ranges_through_a_bounded_cache(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    """A store's mixture, staged as its manifest alone: the windows of a local copy, each fetched once by a
    range read (one window per read: exactly the bytes read), the node's cache never past its budget, the next
    step's windows fetched ahead; blocks
    of several windows fetch the mixture's bytes once; sizes that differ from the manifest are refused."""
    shards, _, shards_url, _ = _upload_inputs(s3, tmp_path / "inputs")
    local = WindowIndex(ShardReader(shards), seq_len=32)
    window = 33 * 2  # bytes of a window: 33 uint16 tokens
    staged = tmp_path / "staged"
    stage_store_shards(shards_url, staged, StoreSource(shards_url, block_bytes=1, cache_bytes=3 * window))
    assert sorted(p.name for p in staged.iterdir()) == ["manifest.json", "store_source.json"]
    reader = StoreShardReader(staged, store_source(staged))  # type: ignore[arg-type]
    reader.check(verify=True)
    index = WindowIndex(reader, seq_len=32)
    ids = np.array([5, 130, 7, 68, 69, 5])  # both files, a file's last window, one window twice
    assert torch.equal(index.batch(ids), local.batch(ids))
    assert (reader.stats.requests, reader.stats.bytes) == (5, 5 * window)  # the distinct windows, once each
    cached = list((staged / "cache").iterdir())
    assert len(cached) == 3 and sum(p.stat().st_size for p in cached) <= 3 * window  # the 3 most recent
    assert torch.equal(index.batch(np.array([68, 69])), local.batch(np.array([68, 69])))
    assert reader.stats.requests == 5  # from the cache
    assert torch.equal(index.batch(np.array([5])), local.batch(np.array([5])))
    assert reader.stats.requests == 6  # dropped from the cache: fetched again
    index.prefetch(np.array([10, 11, 12, 13]))  # the next step's, fetched in the background: 4 > the cache's 3
    for part in ([10, 11], [12, 13]):  # its micro-batches
        assert torch.equal(index.batch(np.array(part)), local.batch(np.array(part)))
    assert reader.stats.requests == 10  # each once
    assert reader.windows([(0, 2300, 33)])[0].tolist() == ShardReader(shards).window(0, 2300, 33).tolist()  # tail
    # blocks of 4 windows and a cache that holds the mixture: every byte fetched once, in few reads
    whole = tmp_path / "whole"
    stage_store_shards(shards_url, whole, StoreSource(shards_url, block_bytes=4 * window, cache_bytes=1 << 20))
    reader = StoreShardReader(whole, store_source(whole))  # type: ignore[arg-type]
    index = WindowIndex(reader, seq_len=32)
    every = np.random.default_rng(0).permutation(index.num_windows)
    for part in np.array_split(every, 10):
        assert torch.equal(index.batch(part), local.batch(part))
    assert reader.stats.requests == -(-69 // 4) + -(-66 // 4)  # each block once
    assert reader.stats.bytes == reader.total_bytes == (2303 + 2202) * 2  # the file tails in the last blocks
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    name = reader.manifest.files[1].path
    fs.pipe_file(f"{BUCKET}/mix/{name}", fs.cat_file(f"{BUCKET}/mix/{name}")[:-2])  # a truncated object
    with pytest.raises(ManifestError, match=f"{name}: 4402 bytes on the store, the manifest says 4404"):
        reader.check(verify=False)


def _listing(prefix: str) -> list[str]:
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    return sorted(fs.find(prefix))


@pytest.mark.parametrize(
    "background", [False, pytest.param(True, marks=pytest.mark.e2e)], ids=["sync", "async_checkpoint"]
)
def test_in_process_run_on_the_store_resumes_to_the_local_losses(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    background: bool,
) -> None:
    """One rank: the bucket's run, stopped and resumed from the bucket, is the local run bit for bit, its shards
    read by ranges (the last file held out for validation), with or without the node's cache (with
    --async-checkpoint: each checkpoint uploaded once its background write is committed)."""
    shards, tok, shards_url, tok_url = _upload_inputs(s3, tmp_path / "inputs")
    scratch = tmp_path / "scratch"
    straight = train(_cfg(shards, tok, tmp_path / "local", scratch))
    out = f"s3://{BUCKET}/train"
    # read by ranges of 15 windows, no cache; the resumed run by the auto ranges (the mixture fits the cache)
    first = train(_cfg(shards_url, tok_url, out, scratch, max_steps=3, async_checkpoint=background, shard_block_kb=1,
                       shard_cache_mb=0))  # fmt: skip
    assert first.steps_done == 3
    committed = StoreCheckpoints(f"{out}/checkpoints").committed()
    assert committed == ["step_000000002", "step_000000003"]
    rest = train(_cfg(shards_url, tok_url, out, scratch, resume=True, async_checkpoint=background))
    assert first.losses + rest.losses == straight.losses
    assert rest.val_losses == straight.val_losses and straight.val_losses  # the held-out file, from the store
    from safetensors.torch import load

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    ours = load(fs.cat_file(f"{BUCKET}/train/hf/model.safetensors"))
    theirs = load((tmp_path / "local/hf/model.safetensors").read_bytes())
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    names = {Path(p).name for p in _listing(f"{BUCKET}/train") if "/checkpoints/" not in p}
    assert {"metrics.jsonl", "run_config.json", "config.json", "tokenizer.json"} <= names
    records = [json.loads(line) for line in fs.cat_file(f"{BUCKET}/train/metrics.jsonl").decode().splitlines()]
    logged = [r["step"] for r in records if "loss" in r]
    assert [s for s in logged] == sorted(set(logged))  # each step once, after the resume
    assert list(scratch.iterdir()) == []  # the staging folder went with the run
    assert not [p for p in _listing(f"{BUCKET}/mix") if "/.readers/" in p]  # and its read lease on the shards
    record = json.loads(fs.cat_file(f"{BUCKET}/train/run_config.json"))  # names the URLs, not scratch copies
    assert record["tokenizer"]["path"] == tok_url and record["train_config"]["shards"] == shards_url
    assert record["train_config"]["out"] == out


def test_store_outputs_and_inputs_are_checked_before_training(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    shards, tok, shards_url, tok_url = _upload_inputs(s3, tmp_path / "inputs")
    scratch = tmp_path / "scratch"
    with pytest.raises(ValueError, match="bucket 'no-such-bucket' does not exist"):
        train(_cfg(shards, tok, "s3://no-such-bucket/train", scratch))
    with pytest.raises(ValueError, match="no such folder on the store"):
        train(_cfg(f"s3://{BUCKET}/nothing-here", tok_url, tmp_path / "local", scratch))
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.pipe_file(f"{BUCKET}/old/metrics.jsonl", b'{"step": 1, "loss": 1.0}\n')
    with pytest.raises(ValueError, match="holds a training run .*--resume"):
        train(_cfg(shards_url, tok_url, f"s3://{BUCKET}/old", scratch))
    assert _listing(f"{BUCKET}/old") == [f"{BUCKET}/old/metrics.jsonl"]  # refused: nothing written
    with ObjectLock(f"s3://{BUCKET}/busy", "training run"):  # another run writes there
        with pytest.raises(ValueError, match="training run"):
            train(_cfg(shards_url, tok_url, f"s3://{BUCKET}/busy", scratch))
    assert _listing(f"{BUCKET}/busy") == []  # its lock released, and nothing written by the refused run
    mixture = _listing(f"{BUCKET}/mix")
    with ObjectLock(shards_url, "mixture build"):  # the mixture is being rebuilt: no run starts on it
        with pytest.raises(ValueError, match=r"s3://trainer-store/mix is being written by a mixture build \("):
            train(_cfg(shards_url, tok_url, tmp_path / "local", scratch))
    assert _listing(f"{BUCKET}/mix") == mixture  # the refused run's lease went with it
    with pytest.raises(ValueError, match=r"--out s3://trainer-store/mix/run: .* apart from --shards"):
        train(_cfg(shards_url, tok_url, f"{shards_url}/run", scratch))  # it trained into the mixture's folder
    assert _listing(f"{BUCKET}/mix") == mixture
    reader = acquire_read_lock(f"s3://{BUCKET}/old", "training run")  # a run trains on `old` as its --shards
    try:
        with pytest.raises(ValueError, match=r"s3://trainer-store/old is being read by a training run \(.* pid"):
            train(_cfg(shards_url, tok_url, f"s3://{BUCKET}/old", scratch, overwrite=True))
    finally:
        reader.release()
    assert _listing(f"{BUCKET}/old") == [f"{BUCKET}/old/metrics.jsonl"]  # --overwrite refused: nothing removed
    assert not (tmp_path / "local").exists()


def _args(shards: str, tok: str, out: str, scratch: Path, *extra: str) -> list[str]:
    return ["trainer/fsdp_train.py", "--shards", shards, "--tokenizer", tok, "--out", out, "--scratch", str(scratch),
            "--micro-batch", "2", "--grad-accum", "2", "--log-every", "1", "--lr", "3e-3", "--no-verify-shards",
            "--keep-checkpoints", "2", *extra]  # fmt: skip


def _partial_steps(prefix: str) -> list[str]:
    return sorted(name for name, done in StoreCheckpoints(f"s3://{prefix}").steps().items() if not done)


@contextlib.contextmanager
def held_run(
    server: S3Server,
    args: list[str],
    pattern: bytes,
    let_through: int,
    logs: Path,
    launcher: str = "torch.distributed.run",
    **env: str,
) -> Iterator[tuple[subprocess.Popen[bytes], HoldingProxy]]:
    """torchrun (2 ranks; `launcher`: its module; `env`: more variables) against the store through a
    HoldingProxy that lets ``let_through`` requests matching ``pattern`` through and holds the next one in
    flight; yields once it is held, and kills what is left of the launcher when done. Its output goes to
    `logs`/stdout and stderr."""
    logs.mkdir(parents=True, exist_ok=True)
    with (
        HoldingProxy(server.port, pattern, let_through=let_through) as proxy,
        (logs / "stdout").open("wb") as stdout,
        (logs / "stderr").open("wb") as stderr,
    ):
        variables = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "AWS_ENDPOINT_URL": proxy.endpoint, **env}
        command = [sys.executable, "-m", launcher, "--standalone", "--nproc_per_node=2", *args]
        environ = subprocess_env(server, **variables)
        proc = subprocess.Popen(command, cwd=REPO, env=environ, stdout=stdout, stderr=stderr)
        try:
            deadline = time.monotonic() + 240
            while not proxy.held.wait(0.1):
                assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before its request was held"
                assert time.monotonic() < deadline, "no matching request reached the proxy in 240 s"
            yield proc, proxy
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _kill_mid_upload(server: S3Server, args: list[str], logs: Path, committed_first: int = 2) -> list[str]:
    """Start torchrun (2 ranks) against the store through a proxy that lets ``committed_first`` checkpoint
    manifests through and holds the next one in flight: every rank's files of that checkpoint are on the store
    (rank 0 writes the manifest after gathering every rank's digests), its commit never arrives. Then SIGKILL
    the launcher, at that point and no other: its ranks die with it (none lives on, holding the upload).
    Returns the partial checkpoints."""
    with held_run(server, args, rb"PUT /[^ ?]*/checksums\.json[ ?]", committed_first, logs) as (proc, proxy):
        ranks = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        try:
            assert wait_gone(ranks) == set(), "a rank outlived its killed launcher"
        finally:
            kill_all(ranks)
    assert len(proxy.matched) == committed_first + 1
    return _partial_steps(f"{BUCKET}/train/checkpoints")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[int, float], Path]:
    """The kill tests' reference: an uninterrupted local two-rank run on their inputs (80 documents, an epoch
    of ~20 steps): its losses by step and its HF export's weights file. Run once for the module."""
    root = tmp_path_factory.mktemp("uninterrupted")
    shards, tok = synthetic_run_inputs(root / "inputs", vocab=96, n_docs=80, seq_len=32)
    torchrun(_args(str(shards), str(tok), str(root / "local"), root / "scratch", "--checkpoint-every", "10"))
    losses = {r["step"]: r["loss"] for r in read_jsonl(root / "local/metrics.jsonl") if "loss" in r}
    return losses, root / "local/hf/model.safetensors"


@pytest.mark.e2e
@pytest.mark.parametrize("upload", [[], ["--async-checkpoint"]], ids=["sync", "async_checkpoint"])
def test_torchrun_killed_mid_upload_resumes_from_the_last_committed_checkpoint(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    uninterrupted: tuple[dict[int, float], Path],
    upload: list[str],
) -> None:
    """Two gloo ranks: killed while a checkpoint uploads (with --async-checkpoint: while the ranks' upload
    threads commit it behind training), rerun with --resume as two nodes that share no disk: the uncommitted
    checkpoint is never loaded nor left behind, and the run ends with the losses and weights of an
    uninterrupted local run."""
    # the kill lands while step 3's manifest is in flight
    _, _, shards_url, tok_url = _upload_inputs(s3, tmp_path / "inputs", n_docs=80)
    straight, weights = uninterrupted
    out = f"s3://{BUCKET}/train"
    every = ["--checkpoint-every", "1", *upload]
    partial = _kill_mid_upload(s3, _args(shards_url, tok_url, out, tmp_path / "scratch", *every), tmp_path / "logs")
    prefix = f"{BUCKET}/train/checkpoints"
    committed = StoreCheckpoints(f"s3://{prefix}").committed()
    assert partial == ["step_000000003"], "a killed upload leaves its partial checkpoint uncommitted"
    assert committed == ["step_000000001", "step_000000002"]
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for name in committed:  # every checkpoint a reader would take is whole: its manifest lists what is there
        listed = json.loads(fs.cat_file(f"{prefix}/{name}/{'checksums.json'}"))["files"]
        assert sorted(listed) == sorted(Path(p).name for p in fs.find(f"{prefix}/{name}") if "checksums" not in p)
    # the rerun: the same 2 ranks as two "nodes" (one rank each) that share no folder: each its own scratch
    # and TMPDIR, so each node fetches the inputs and the checkpoint itself and uploads what its rank wrote
    port = str(free_port())
    rerun = ["--checkpoint-every", "5", *upload, "--resume"]  # fewer saves: the losses do not depend on them
    nodes = []
    for node in (0, 1):
        (tmp_path / f"node{node}").mkdir()
        env = subprocess_env(s3, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TMPDIR=str(tmp_path / f"node{node}"))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            f"--node_rank={node}",
            "--nproc_per_node=1",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            *_args(shards_url, tok_url, out, tmp_path / f"scratch{node}", *rerun),
        ]
        nodes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))  # fmt: skip
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-3000:] + outputs[1][1][-3000:]
    assert f"resumed from {tmp_path / 'scratch0'}" in outputs[0][0] and committed[-1] in outputs[0][0]
    for node in (0, 1):  # each node's staging went with the run
        assert list((tmp_path / f"scratch{node}").iterdir()) == []
    assert _partial_steps(prefix) == []  # the next save removed what the killed one left
    records = [json.loads(line) for line in fs.cat_file(f"{BUCKET}/train/metrics.jsonl").decode().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if "loss" in r}
    assert losses == straight and len(straight) >= 8
    assert [r["step"] for r in records if "loss" in r] == sorted(straight)  # each step once: none lost, none twice
    from safetensors.torch import load

    ours = load(fs.cat_file(f"{BUCKET}/train/hf/model.safetensors"))
    theirs = load(weights.read_bytes())
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
