"""Train a Llama-style model for exactly one epoch over token shards with FSDP2.

    torchrun --nproc_per_node=2 trainer/fsdp_train.py --shards out/mix --tokenizer out/tok/tokenizer.json \
        --model tiny --out out/train

Pipelines call `train(TrainConfig(...))` in-process instead (one rank, no torchrun needed).
Outputs under --out: metrics.jsonl, checkpoints/step_*/ (DCP), hf/ (transformers checkpoint).
This file is only the entry point: flags in `trainer/train_config.py`, the run in `trainer/loop.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make `trainer` and `mixtures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json
import os

from trainer.loop import TrainResult, train
from trainer.train_config import TrainConfig, parse_args

__all__ = ["TrainConfig", "TrainResult", "main", "parse_args", "train"]


def main(argv: list[str] | None = None) -> None:
    result = train(parse_args(argv, description=__doc__))
    if os.environ.get("RANK", "0") == "0":
        final = result.losses[-1][1] if result.losses else None
        print(json.dumps({"steps_done": result.steps_done, "epoch_steps": result.epoch_steps, "final_loss": final}))


if __name__ == "__main__":
    main()
