"""What a run does with an `--out` that is not empty: a rerun must never quietly erase a finished run.

The trainer's rule, as `mixtures.build`'s: an `--out` holding a previous training run (its metrics,
config, checkpoints or export) or anything else is refused, one line saying what is there, unless
`--resume` (continue from its newest checkpoint) or `--overwrite` (remove the previous run's outputs,
and only those, then start at step 0) is given. There is no silent default: a plain rerun of the same
command after a kill is refused with the `--resume` it needs, so the two cases (continue it, start over)
are always the user's explicit choice.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from common.lock import LOCK_NAME, FolderLock

# Everything a run writes under --out (trainer/loop.py, metrics.py, profiling.py); --overwrite removes these only.
RUN_OUTPUTS = ("metrics.jsonl", "run_config.json", "checkpoints", "hf", "data_indices", "profile", "tensorboard",
               "wandb")  # fmt: skip


class OutputInUse(ValueError):
    """--out holds a previous run (or other files) and neither --resume nor --overwrite says what to do."""


def _describe_run(out: Path) -> str:
    """'a finished training run (...)' / 'a stopped training run (...)': what a refusal names."""
    steps = [p.name for p in (out / "checkpoints").glob("step_*") if not p.name.endswith(".tmp")]
    records = out / "metrics.jsonl"
    logged = sum(1 for line in records.read_text().splitlines() if line.strip()) if records.is_file() else 0
    state = "finished" if (out / "hf" / "config.json").is_file() else "stopped"
    last = f"last checkpoint {max(steps)}" if steps else "no checkpoint"
    return f"a {state} training run ({logged} metrics records, {last})"


def check_output(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an `--out` with a previous run or foreign files, unless --resume / --overwrite says what to do."""
    if resume and overwrite:
        raise OutputInUse("--resume and --overwrite exclude each other: continue the run in --out, or replace it")
    if not out.is_dir():
        return
    if (out / LOCK_NAME).exists():  # a live run there is named as such (FolderLocked), before what it wrote
        FolderLock(out, "training run").acquire().release()
    if resume or overwrite:
        return
    present = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)
    if not present:
        return
    if any(name in RUN_OUTPUTS for name in present):
        what = _describe_run(out)
        hint = "--resume to continue it or --overwrite to replace it"
    else:
        what = f"{len(present)} other entries ({', '.join(present[:3])}{', ...' if len(present) > 3 else ''})"
        hint = "--overwrite to write a run beside them"
    raise OutputInUse(f"{out} holds {what}; pass {hint}, or choose another --out")


def clear_outputs(out: Path) -> list[str]:
    """--overwrite: remove the previous run's outputs (RUN_OUTPUTS, nothing else); returns what was removed."""
    removed = []
    for name in RUN_OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed
