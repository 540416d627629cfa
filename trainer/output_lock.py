"""One training run per `--out`: rank 0 holds the folder's lock (common/lock.py) and every rank learns
whether it got it, so a second run on the same folder is refused by all its ranks alike (one line,
naming the holder) instead of interleaving its checkpoints and metrics with the first run's."""

from __future__ import annotations

from pathlib import Path

from common.lock import FolderLock, FolderUnavailable
from trainer.distributed import DistInfo, rank0_verdict


def lock_output(out: Path, info: DistInfo) -> FolderLock | None:
    """Rank 0 takes `out`'s lock (kept until the process ends); collective: every rank calls it."""
    return rank0_verdict(lambda: FolderLock(out, "training run").acquire(), FolderUnavailable)
