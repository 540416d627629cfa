"""Checkpoint, then stop, when the scheduler asks: ``--stop-file PATH``.

``trainer.slurm``'s job script touches the file when Slurm signals the end of the time limit or a
preemption (``--signal=B:USR1@120``); every rank looks for it after each step and the ranks agree (a MAX
all-reduce of one number), so all of them save the same step's checkpoint and stop together; the script
then requeues the job, which resumes from that checkpoint. The file is on storage every node mounts.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist


def stop_requested(path: Path, device: torch.device | str) -> bool:
    """True on every rank when any rank sees ``path`` (collective: every rank calls it at the same step)."""
    flag = torch.tensor([1.0 if path.exists() else 0.0], device=device)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
