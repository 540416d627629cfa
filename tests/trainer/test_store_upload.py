"""--async-checkpoint with a store --out: the upload runs in a thread of its own while training goes on, the
checkpoint is committed (its manifest written) only once every file landed, with the run's records as they
were at its save; a failed upload commits nothing and is raised at the next wait; two ranks resume exactly.

The first test's store is fsspec's in-memory file system with a gate on its uploads (`held://`): a test
double of the store, so the ordering is shown by events, not by timing; the second uses moto's S3 server."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tests.support.s3_server import S3Server, s3, s3_server_session  # noqa: F401
from tests.support.trainer_inputs import torchrun
from tests.trainer.test_async_checkpoint import _model_and_optimizer, _step
from tests.trainer.test_store import BUCKET, _args, _upload_inputs, held_run
from trainer.checkpoint_trust import CHECKSUMS
from trainer.distributed import init_distributed, shutdown
from trainer.store import StoreCheckpointer, StoreCheckpoints, UploadFailed

WAIT = 120.0  # seconds an event may take before the test fails (reached only when the ordering is wrong)


class HeldStore(MemoryFileSystem):
    """An in-memory store whose file uploads wait at `gate` (and fail while `fail` is set); `callers` names
    the threads that uploaded."""

    protocol = "held"
    store: dict[str, Any] = {}  # noqa: RUF012 (its own objects, not memory://'s)
    pseudo_dirs = [""]  # noqa: RUF012
    gate = threading.Event()
    reached = threading.Event()  # an upload is waiting at the gate
    fail = False
    timed_out = False
    callers: set[str] = set()  # noqa: RUF012

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return super()._strip_protocol(path.removeprefix("held://"))

    def put_file(self, lpath: str, rpath: str, *args: Any, **kwargs: Any) -> None:
        type(self).callers.add(threading.current_thread().name)
        type(self).reached.set()
        if not type(self).gate.wait(WAIT):
            type(self).timed_out = True
        if type(self).fail:
            raise OSError("the store refused the upload")
        super().put_file(lpath, rpath, *args, **kwargs)


@pytest.fixture
def held() -> Iterator[type[HeldStore]]:
    fsspec.register_implementation("held", HeldStore, clobber=True)
    HeldStore.gate.clear()
    HeldStore.reached.clear()
    HeldStore.fail, HeldStore.timed_out = False, False
    HeldStore.callers.clear()
    try:
        yield HeldStore
    finally:
        HeldStore.gate.set()  # a failing test leaves no thread waiting
        HeldStore.store.clear()
        HeldStore.pseudo_dirs[:] = [""]


def _log(local: Path, step: int) -> None:
    with (local / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\n")


def test_the_upload_runs_behind_training_and_commits_once_every_file_landed(
    held: type[HeldStore], tmp_path: Path
) -> None:
    info = init_distributed("cpu")
    try:
        model, optimizer, scheduler = _model_and_optimizer()
        local = tmp_path / "out"
        local.mkdir()
        url = "held://run"
        ckpt = StoreCheckpointer(local / "checkpoints", 2, f"{url}/checkpoints", info, True, (local, url))
        store = StoreCheckpoints(f"{url}/checkpoints")
        fs = fsspec.filesystem("held")
        _step(model, optimizer)
        _log(local, 2)
        ckpt.save(2, model, optimizer, scheduler, {"consumed_samples": 2})
        # the training thread is free again: the upload thread reaches the store on its own
        assert held.reached.wait(WAIT), "no upload started while training went on"
        _step(model, optimizer)
        _log(local, 3)  # logged after the save: not part of step 2's records
        assert store.steps() in ({}, {"step_000000002": False}) and store.committed() == []  # held: no commit
        held.gate.set()
        ckpt.finish()
        assert not held.timed_out and "MainThread" not in held.callers
        assert store.committed() == ["step_000000002"]
        manifest = json.loads(fs.cat_file(f"run/checkpoints/step_000000002/{CHECKSUMS}"))["files"]
        listed = {Path(p).name for p in fs.find("run/checkpoints/step_000000002")} - {CHECKSUMS}
        assert sorted(manifest) == sorted(listed) and "trainer_state.json" in listed
        assert [json.loads(x)["step"] for x in fs.cat_file("run/metrics.jsonl").decode().splitlines()] == [2]

        held.fail = True  # the next upload fails: nothing committed, raised at the next wait on every rank
        ckpt.save(4, model, optimizer, scheduler, {"consumed_samples": 4})
        with pytest.raises(UploadFailed, match="step_000000004 not committed.*the store refused the upload"):
            ckpt.finish()
        assert store.committed() == ["step_000000002"]
        held.fail = False
        ckpt.save(6, model, optimizer, scheduler, {"consumed_samples": 6})  # removes step 4's leftovers
        ckpt.finish()
        assert store.steps() == {"step_000000002": True, "step_000000006": True}
    finally:
        shutdown(info)


@pytest.mark.e2e  # two torchrun launches
def test_two_ranks_uploading_behind_training_commit_whole_checkpoints_and_resume(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    """Two gloo ranks, --async-checkpoint with a checkpoint each step on the store (each rank's upload and the
    commit in the upload threads, over their own gloo group): stopped at step 3, resumed from the bucket's
    step 3 to step 6; every committed checkpoint holds both ranks' shards and exactly the files its manifest
    lists, and each step is logged once. (That the upload leaves the losses alone: the one-rank store and the
    two-rank local --async-checkpoint resume tests, bit for bit.)"""
    _, _, shards_url, tok_url = _upload_inputs(s3, tmp_path / "inputs")
    scratch = tmp_path / "scratch"
    out, every = f"s3://{BUCKET}/train", ["--checkpoint-every", "1", "--async-checkpoint"]
    torchrun(_args(shards_url, tok_url, out, scratch, *every, "--max-steps", "3"))
    prefix = f"{BUCKET}/train/checkpoints"
    assert StoreCheckpoints(f"s3://{prefix}").steps() == {"step_000000002": True, "step_000000003": True}
    rest = torchrun(_args(shards_url, tok_url, out, scratch, *every, "--resume", "--max-steps", "6"))
    assert "step_000000003 at step 3" in rest.stdout, rest.stdout[-2000:]
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    records = [json.loads(line) for line in fs.cat_file(f"{BUCKET}/train/metrics.jsonl").decode().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == list(range(1, 7))
    committed = StoreCheckpoints(f"s3://{prefix}").steps()
    assert all(committed.values()) and sorted(committed) == ["step_000000005", "step_000000006"]
    for name in committed:
        listed = json.loads(fs.cat_file(f"{prefix}/{name}/{CHECKSUMS}"))["files"]
        assert sorted(listed) == sorted(Path(p).name for p in fs.find(f"{prefix}/{name}") if CHECKSUMS not in p)
        assert {n[:4] for n in listed if n.endswith(".distcp")} == {"__0_", "__1_"}  # both ranks' shards
    assert list(scratch.iterdir()) == []


GONE = {  # where the store goes away: (the request held, how many such pass first, --checkpoint-every, the error)
    "commit": (rb"PUT /[^ ?]*/step_000000002/checksums\.json[ ?]", 0, "1",
               r"checkpoint step_000000002 not committed on {out}/checkpoints: rank 0 could not write its manifest: "),
    "records": (rb"PUT /[^ ?]*/train/metrics\.jsonl[ ?]", 1, "100", r"the run's records not uploaded to {out}: "),
    "fetch": (rb"GET /[^ ?]*/tok/tokenizer\.json[ ?]", 0, "1", r"\w+: "),  # the inputs, fetched on each node
}  # fmt: skip


@pytest.mark.e2e  # one torchrun launch each
@pytest.mark.parametrize("where", sorted(GONE))
def test_a_store_gone_mid_upload_ends_the_run_in_one_line(s3: S3Server, tmp_path: Path, where: str) -> None:  # noqa: F811
    """Two gloo ranks, --async-checkpoint: the store goes away (its endpoint drops every connection and takes no
    new one) while rank 0's upload thread writes step 2's manifest (`commit`: rank 1's waits for it), or
    while rank 0 uploads the run's records at the end (`records`), or while the nodes fetch the inputs
    (`fetch`: botocore's connection error is no OSError). Every rank ends (none waits for ever in a
    collective the failed one never reaches: both hung), the launcher exits 2 with one `error:` line (rank 0
    released its lock with a warning: no traceback), and a reader of the store sees whole checkpoints only."""
    held, let_through, every, error = GONE[where]
    shards, tok, shards_url, tok_url = _upload_inputs(s3, tmp_path / "inputs")
    if where != "fetch":  # local inputs: only --out is on the store
        shards_url, tok_url = str(shards), str(tok)
    out = f"s3://{BUCKET}/train"
    args = _args(shards_url, tok_url, out, tmp_path / "scratch", "--checkpoint-every", every, "--async-checkpoint")
    # one retry per request (botocore's default of 5 attempts with backoff only makes the end come later)
    with held_run(s3, args, held, let_through, tmp_path / "logs", "trainer.launch", AWS_MAX_ATTEMPTS="2") as run:
        run[1].stop()  # the store is gone: the held request's connection closed, new ones refused
        assert run[0].wait(timeout=240) == 2
    said = [line for line in (tmp_path / "logs/stderr").read_text().splitlines() if "--no-verify-shards" not in line]
    leases = [f"warning: could not remove s3://{BUCKET}/mix/.readers/"] if where == "fetch" else []  # --shards'
    assert [line[: len(start)] for line, start in zip(said, leases, strict=False)] == leases, said
    assert len(said) == len(leases) + 2, said
    assert said[-2].startswith(f"warning: could not remove {out}/.lock ("), said
    assert re.fullmatch("error: " + error.format(out=out) + ".+", said[-1]), said
    steps = StoreCheckpoints(f"{out}/checkpoints").steps()
    if where == "commit":
        assert sorted(name for name, done in steps.items() if done) == ["step_000000001"], steps
    elif where == "records":  # the last checkpoint was committed before the end: the run can be resumed and ended again
        assert len(steps) == 1 and all(steps.values()), steps
    else:  # no step trained
        assert steps == {}, steps
