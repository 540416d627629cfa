"""Sharded, atomic checkpoints with torch.distributed.checkpoint (DCP).

Each save writes `step_000123.tmp/` with DCP (every rank writes its own shards), then rank 0
renames it to `step_000123/` once all ranks are done. A rename is atomic on POSIX, so a save killed
at any point leaves only a `.tmp` directory, which loading ignores and the next save removes: the
previous checkpoint stays the latest loadable one.

Before the rename rank 0 writes `checksums.json` (the sha256 of every file), and loading verifies it,
and unpickles `.metadata` through an allowlist, before anything else: see `checkpoint_trust.py` for
what loading a checkpoint trusts.

With `background=True` (`--async-checkpoint`) a save copies the state to CPU memory (DCP's
`async_save` stager) and returns; the ranks write their shards from a thread, over a gloo group of
their own so its collectives never interleave with the training step's. Rank 0 commits (checksums,
rename) only once DCP's write is complete on every rank: its future resolves after the coordinator
gathered all ranks' write results and wrote `.metadata`. At most one save is in flight: the next save,
a load and `finish()` (the end of the run) wait for it. A kill before the commit leaves a `.tmp`, as
with a synchronous save.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from trainer.checkpoint_trust import SafeFileSystemReader, UntrustedCheckpoint, verify_checkpoint, write_checksums
from trainer.distributed import rank0_verdict

_STEP_DIR = re.compile(r"^step_(\d{9})$")
TRAINER_STATE = "trainer_state.json"


def rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    """Save / find / load checkpoints under `root`, keeping the newest `keep`; `background`: saves are
    written while training goes on (see the module docstring)."""

    def __init__(self, root: Path, keep: int = 2, background: bool = False) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.root, self.keep, self.background = Path(root), keep, background
        self._pending: Future[Any] | None = None  # the save in flight (rank 0: its write and commit)
        self._pending_final: Path | None = None
        self._writer_group: dist.ProcessGroup | None = None
        self._committer: ThreadPoolExecutor | None = None

    def complete(self) -> list[Path]:
        """Committed checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if _STEP_DIR.match(p.name) and (p / ".metadata").is_file()]
        return sorted(found, key=lambda p: p.name)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        data_state: dict[str, Any],
        meta: dict[str, Any] | None = None,
    ) -> Path:
        """Collective: all ranks call it. `meta` (model config, tokenizer) goes to trainer_state.json
        so a checkpoint directory can be exported on its own. Returns the committed directory."""
        self.finish()  # one save in flight at most: the previous one is committed before this one starts
        rank = dist.get_rank()
        final = self.root / f"step_{step:09d}"
        tmp = final.with_name(final.name + ".tmp")
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob("*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        dist.barrier()
        state = self._state(model, optimizer)
        state["scheduler"] = scheduler.state_dict()
        state["data"] = data_state
        state[f"rng_rank{rank}"] = rng_state()
        record = {"step": step, "data": data_state, "world_size": dist.get_world_size(), **(meta or {})}
        if self.background:
            self._save_in_background(state, tmp, final, record)
            return final
        dcp.save(state, checkpoint_id=tmp)
        dist.barrier()
        if rank == 0:
            self._commit(tmp, final, record)
        dist.barrier()
        self.after_commit(final)
        return final

    def after_commit(self, final: Path) -> None:
        """Collective, once `final` is committed (a background save: when it is waited for); the store's
        checkpointer uploads a synchronous save there (a background one: from its own upload thread)."""

    def _save_in_background(self, state: dict[str, Any], tmp: Path, final: Path, record: dict[str, Any]) -> None:
        if self._writer_group is None:  # collective, like every save: all ranks create it together
            self._writer_group = dist.new_group(backend="gloo")
        written = dcp.async_save(state, checkpoint_id=tmp, process_group=self._writer_group)  # state copied
        self._pending_final = final
        if dist.get_rank() != 0:
            self._pending = written
            return
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-commit")

        def commit() -> None:
            written.result()  # every rank's shards and .metadata are on disk
            self._commit(tmp, final, record)

        self._pending = self._committer.submit(commit)

    def _commit(self, tmp: Path, final: Path, record: dict[str, Any]) -> None:
        """Rank 0, once every rank's shards are written: the manifest, then the atomic rename."""
        (tmp / TRAINER_STATE).write_text(json.dumps(record, indent=1))
        write_checksums(tmp)
        if final.exists():  # re-saving a step (e.g. after a resume) replaces it
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        for old in self.complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def finish(self) -> None:
        """Collective: wait until the save in flight (if any) is written and committed on every rank."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        failed: BaseException | None = None
        try:
            pending.result()
        except Exception as err:  # still meet the others at the barrier, then raise
            failed = err
        dist.barrier()
        if failed is not None:
            raise failed
        assert self._pending_final is not None
        self.after_commit(self._pending_final)

    def fetch(self, path: Path) -> None:
        """Collective: make checkpoint `path` (from `latest`) readable on this node before its trainer state is
        read; a local one is; the store's checkpointer downloads it."""

    def load(
        self,
        path: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        data_template: dict[str, Any],
    ) -> dict[str, Any]:
        """Restore model, optimizer, scheduler and this rank's RNG in place; return the saved data state.

        `data_template` names the data-state keys to read (DCP loads what the caller asks for).
        """
        self.finish()
        rank = dist.get_rank()
        verify_on_rank0(path)
        saved_keys = set(SafeFileSystemReader(path).read_metadata().state_dict_metadata)
        state = self._state(model, optimizer)
        state["scheduler"] = scheduler.state_dict()
        state["data"] = dict(data_template)
        rng_key = f"rng_rank{rank}"
        has_rng = any(k.startswith(rng_key + ".") for k in saved_keys)
        if has_rng:  # absent when resuming on more ranks than saved
            state[rng_key] = rng_state()
        dcp.load(state, storage_reader=SafeFileSystemReader(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        scheduler.load_state_dict(state["scheduler"])
        if has_rng:
            set_rng_state(state[rng_key])
        return state["data"]


def verify_on_rank0(path: Path) -> None:
    """Rank 0 checks the manifest once (hashing is I/O-bound; the folder is shared storage), the others
    wait for its verdict, so every rank refuses together with rank 0's one-line reason."""
    rank0_verdict(lambda: verify_checkpoint(path), UntrustedCheckpoint)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
