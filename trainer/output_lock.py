"""One training run per `--out`: rank 0 holds the folder's lock (common/lock.py) and every rank learns
whether it got it, so a second run on the same folder is refused by all its ranks alike (one line,
naming the holder) instead of interleaving its checkpoints and metrics with the first run's.

The run also holds a read lock on its `--shards` folder, so that a `mixtures.build --overwrite` of the
mixture it trains on is refused (it deleted the shards under a running job) and a run does not start
on a mixture that is being rebuilt; on an object store, a read lease plays that part (trainer/store.py)."""

from __future__ import annotations

from pathlib import Path

from common.lock import FolderLock, FolderReadLock, FolderUnavailable
from common.storage import is_remote
from trainer.distributed import DistInfo, rank0_verdict


def lock_output(out: Path, info: DistInfo) -> FolderLock | None:
    """Rank 0 takes `out`'s lock (kept until the process ends); collective: every rank calls it."""
    return rank0_verdict(lambda: FolderLock(out, "training run").acquire(), FolderUnavailable)


def lock_shards(shards: str, info: DistInfo) -> FolderReadLock | None:
    """Rank 0 takes a read lock on the local `shards` folder (kept until released); collective.
    A mixture on an object store is leased by `trainer.store.staged` before it is copied to the scratch."""
    if is_remote(shards):
        return None

    def take() -> FolderReadLock:
        lock = FolderReadLock(shards, "training run")
        lock.acquire()
        return lock

    return rank0_verdict(take, FolderUnavailable)
