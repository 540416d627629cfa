"""Train a Llama-style model for exactly one epoch over token shards with FSDP2.

    python -m trainer.launch --nproc_per_node=2 trainer/fsdp_train.py --shards out/mix \\
        --tokenizer out/tok/tokenizer.json --model tiny --out out/train

(`trainer.launch` is torchrun, with torchrun's flags; its failure block is cut to the ranks' one line.)
An --out that holds a previous run is refused unless --resume (continue it) or --overwrite (replace it).

Pipelines call `train(TrainConfig(...))` in-process instead (one rank, no torchrun needed).
Outputs under --out: metrics.jsonl, checkpoints/step_*/ (DCP), hf/ (transformers checkpoint).
This file is only the entry point: flags in `trainer/train_config.py`, the run in `trainer/loop.py`.

A configuration error (bad flags, shards that do not match, a refused checkpoint) is raised on every
rank alike; each rank exits 2 and only rank 0 prints it, as one `error: ...` line, instead of one
traceback per rank. torchrun then still prints its own ChildFailedError block; `python -m
trainer.launch` is torchrun with that block reduced to the ranks' line (trainer/launch.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make `trainer` and `mixtures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.lifetime import die_with_launcher

die_with_launcher()  # first: a rank killed with its launcher while it imports torch must not run on

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from common.cli import USAGE_ERROR, one_line  # noqa: E402
from trainer.loop import TrainResult, train  # noqa: E402
from trainer.train_config import TrainConfig, parse_args  # noqa: E402

# What bad input raises before (or instead of) training: the project's config, manifest, shard and
# checkpoint checks are ValueErrors (ManifestError, IncompatibleShards, UntrustedCheckpoint, ...),
# unknown presets KeyErrors; a missing file is an OSError.
CONFIG_ERRORS = (ValueError, KeyError, OSError)

__all__ = ["TrainConfig", "TrainResult", "main", "parse_args", "train"]


def _is_rank0() -> bool:
    return os.environ.get("RANK", "0") == "0"


def main(argv: list[str] | None = None) -> None:
    die_with_launcher()  # a torchrun rank runs in its own session: die with the launcher (again: main may be
    # called by another entry point than this file's import)
    # argparse's usage error is the same on every rank: let rank 0 alone print it
    with contextlib.nullcontext() if _is_rank0() else contextlib.redirect_stderr(io.StringIO()):
        cfg = parse_args(argv, description=__doc__)
    if not cfg.verify_shards and _is_rank0():
        print(
            f"warning: --no-verify-shards: {cfg.shards} is not checked against its manifest's sha256; "
            "a corrupted shard trains on garbage ids without an error",
            file=sys.stderr,
        )
    try:
        result = train(cfg)
    except CONFIG_ERRORS as err:
        if _is_rank0():
            print(f"error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None
    if _is_rank0():
        final = result.losses[-1][1] if result.losses else None
        print(json.dumps({"steps_done": result.steps_done, "epoch_steps": result.epoch_steps, "final_loss": final}))


if __name__ == "__main__":
    main()
