"""SFT under real `torchrun --nproc_per_node=2` (gloo, fp32) gives the losses of one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl
from tests.support.trainer_inputs import read_jsonl, torchrun
from trainer.optim import OptimConfig
from trainer.sft import SFTConfig, sft

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
def test_two_ranks_give_the_losses_of_one_process(tmp_path: Path, lora: int) -> None:
    base = tiny_base(tmp_path / "base", chat_tokenizer_dir(tmp_path / "tok"))
    data = write_jsonl(tmp_path / "train.jsonl", arithmetic_records(72))
    common = ["--lr", "3e-3", "--weight-decay", "0", "--warmup-steps", "2", "--seq-len", "127", "--no-bf16"]
    common += ["--log-every", "1", "--val-holdout", "8", "--eval-every", "2", "--no-export-hf", "--device", "cpu"]
    common += ["--lora-rank", str(lora), "--lora-targets", "wq,wv,w2"]
    args = ["-m", "trainer.sft", "--base", str(base), "--data", str(data), "--out", str(tmp_path / "two"), *common]
    torchrun([*args, "--micro-batch", "2", "--grad-accum", "1"])
    optim = OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=2)
    one = sft(SFTConfig(base, data, tmp_path / "one", micro_batch=2, grad_accum=2, seq_len=127, bf16=False, log_every=1,
                        val_holdout=8, eval_every=2, export_hf=False, device="cpu", optim=optim, lora_rank=lora,
                        lora_targets="wq,wv,w2"))  # fmt: skip
    records = read_jsonl(tmp_path / "two" / "metrics.jsonl")
    two = {r["step"]: r["loss"] for r in records if "loss" in r}
    two_val = {r["step"]: r["val_response_loss"] for r in records if "val_response_loss" in r}
    assert sorted(two) == [s for s, _ in one.losses] and len(two) >= 6
    assert max(abs(two[s] - loss) for s, loss in one.losses) < 1e-5
    assert sorted(two_val) == [s for s, _ in one.val_losses]
    assert max(abs(two_val[s] - loss) for s, loss in one.val_losses) < 1e-5
    assert one.losses[-1][1] < one.losses[0][1]
