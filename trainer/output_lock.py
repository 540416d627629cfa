"""One training run per `--out`: rank 0 holds the folder's lock (common/lock.py) and every rank learns
whether it got it, so a second run on the same folder is refused by all its ranks alike (one line,
naming the holder) instead of interleaving its checkpoints and metrics with the first run's."""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from common.lock import FolderLock, FolderUnavailable
from trainer.distributed import DistInfo


def lock_output(out: Path, info: DistInfo) -> FolderLock | None:
    """Rank 0 takes `out`'s lock (kept until the process ends); collective: every rank calls it."""
    lock, refusal = None, None
    if info.is_main:
        try:
            lock = FolderLock(out, "training run").acquire()
        except FolderUnavailable as err:
            refusal = str(err)
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [refusal]
        dist.broadcast_object_list(box, src=0)
        refusal = box[0]
    if refusal is not None:
        raise FolderUnavailable(refusal)
    return lock
