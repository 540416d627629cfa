"""The CLI under pipeline parallel: `torchrun --nproc_per_node=4 trainer/fsdp_train.py --pp 2 --dp-shard 2`.

A whole epoch with held-out evaluation and the Hugging Face export (which under PP goes through the
final checkpoint, since no rank holds every stage), compared with the same run in one process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig

pytestmark = pytest.mark.e2e

COMMON = {"micro_batch": 2, "lr": 3e-3, "val_holdout_files": 1, "eval_every": 2, "val_batches": 2}


def test_pp_fsdp_cli_epoch_equals_one_process(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=120, seq_len=32)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in COMMON.items()]
    args = ["trainer/fsdp_train.py", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "pp")]
    extra = ["--pp", "2", "--dp-shard", "2", "--grad-accum", "4", "--untied", "--no-bf16", "--log-every", "1"]
    torchrun([*args, *flags, *extra, "--no-verify-shards"], nproc=4, timeout=600)
    records = read_jsonl(tmp_path / "pp" / "metrics.jsonl")
    one = train(
        TrainConfig(
            shards=shards,
            tokenizer=tok,
            out=tmp_path / "one",
            micro_batch=2,
            grad_accum=8,
            untied=True,
            bf16=False,
            log_every=1,
            eval_every=2,
            val_holdout_files=1,
            val_batches=4,  # one rank reads the 2 x 2 batches the two data-parallel ranks read
            optim=OptimConfig(lr=3e-3),
            verify_shards=False,
            device="cpu",
        )
    )
    losses = [r["loss"] for r in records if "loss" in r]
    val = [r["val_loss"] for r in records if "val_loss" in r]
    assert len(losses) == one.epoch_steps >= 4 and len(val) == len(one.val_losses)
    np.testing.assert_allclose(losses, [v for _, v in one.losses], rtol=1e-5, atol=0)
    np.testing.assert_allclose(val, [v for _, v in one.val_losses], rtol=1e-5, atol=0)
    pp_hf = load_file(tmp_path / "pp" / "hf" / "model.safetensors")
    one_hf = load_file(one.hf_dir / "model.safetensors")
    assert pp_hf.keys() == one_hf.keys()
    assert max((pp_hf[k] - one_hf[k]).abs().max().item() for k in one_hf) < 1e-5
