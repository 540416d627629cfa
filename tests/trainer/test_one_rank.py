"""One fp32 rank trains a plain module (no FSDP2 wrap): the same numbers as FSDP2 at one rank, exact resume."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.config import ModelConfig
from trainer.distributed import init_distributed, shutdown
from trainer.engine import TrainEngine
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig


def test_plain_and_fsdp_at_one_rank_are_bitwise_equal() -> None:
    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=32).with_vocab(65)
    batches = [torch.randint(0, 65, (3, 33), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    info = init_distributed("cpu")
    try:
        runs = {}
        for fsdp in (True, False):
            engine = TrainEngine(cfg, info, OptimConfig(lr=1e-2, warmup_steps=1), 10, bf16=False, fsdp=fsdp)
            assert engine.fsdp is fsdp
            losses = [float(engine.train_step([b, b]).loss) for b in batches]
            params = {n: p.full_tensor() if fsdp else p.detach() for n, p in engine.model.named_parameters()}
            runs[fsdp] = losses, params
        assert runs[True][0] == runs[False][0]
        assert all(torch.equal(runs[True][1][n], runs[False][1][n]) for n in runs[True][1])
        tied = TrainEngine(cfg, info, OptimConfig(), 10, bf16=False)
        assert not tied.fsdp and tied.model.output.weight is tied.model.tok_embeddings.weight
        assert TrainEngine(cfg, info, OptimConfig(), 10, bf16=True).fsdp  # bf16 keeps FSDP2's mixed precision
    finally:
        shutdown(info)


def test_fp32_one_rank_run_resumes_exactly(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=60, seq_len=32)
    base = {"micro_batch": 4, "grad_accum": 2, "optim": OptimConfig(lr=3e-3), "log_every": 1, "bf16": False}

    def cfg(out: str, **kw: object) -> TrainConfig:
        return TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / out, verify_shards=False, **{**base, **kw})  # type: ignore[arg-type]

    straight = train(cfg("a"))
    first = train(cfg("b", max_steps=3, export_hf=False))
    rest = train(cfg("b", resume=True))
    assert first.losses + rest.losses == straight.losses
    assert rest.hf_dir is not None and (rest.hf_dir / "model.safetensors").is_file()
