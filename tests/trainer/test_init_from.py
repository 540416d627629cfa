"""`--init-from`: phase 2 starts from phase 1's final weights and reads its own mixture once, both recorded."""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.trainer_inputs import random_docs, read_jsonl, synthetic_run_inputs, write_shards
from trainer.distributed import init_distributed, shutdown
from trainer.engine import TrainEngine
from trainer.export_hf import load_checkpoint_model
from trainer.fsdp_train import TrainConfig, train
from trainer.init_from import InitFromError, init_from
from trainer.model import Transformer
from trainer.optim import OptimConfig


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("phases")
    shards_a, tok = synthetic_run_inputs(root, vocab=96, n_docs=60, seq_len=32)
    shards_b = root / "anneal"
    write_shards(shards_b, random_docs(40, 96, seed=7), tok, seq_len=32)
    base = {"micro_batch": 4, "log_every": 1, "verify_shards": False, "optim": OptimConfig(lr=3e-3)}
    one = train(TrainConfig(shards=shards_a, tokenizer=tok, out=root / "one", **base))  # type: ignore[arg-type]
    optim = OptimConfig(lr=1e-3, schedule="wsd", wsd_decay_fraction=1.0, warmup_steps=1)
    two_cfg = {**base, "optim": optim, "init_from": one.checkpoint, "save_data_indices": True}
    two = train(TrainConfig(shards=shards_b, tokenizer=tok, out=root / "two", **two_cfg))  # type: ignore[arg-type]
    return {"root": root, "a": shards_a, "b": shards_b, "tok": tok, "one": one, "two": two}


def test_phase_two_starts_from_phase_one_final_weights(phases: dict) -> None:
    one = phases["one"]
    weights, state = load_checkpoint_model(one.checkpoint)
    from trainer.config import ModelConfig

    cfg = ModelConfig(**state["model_config"])
    reference = Transformer(cfg)
    reference.load_state_dict(weights)
    batch = torch.randint(0, 96, (2, 32), generator=torch.Generator().manual_seed(3))
    info = init_distributed("cpu")
    try:
        for source in (one.checkpoint, one.hf_dir):
            engine = TrainEngine(cfg, info, OptimConfig(), 10, bf16=False, seed=123)  # another init, overwritten
            record = init_from(source, engine.model, cfg)
            with torch.no_grad():
                assert torch.equal(engine.model(batch), reference(batch)), record
        small = TrainEngine(cfg.__class__(**{**cfg.to_dict(), "dim": 32}), info, OptimConfig(), 10, bf16=False)
        with pytest.raises(InitFromError, match="dim 64 vs 32"):
            init_from(one.checkpoint, small.model, small.model.cfg)
    finally:
        shutdown(info)


def test_phase_two_reads_every_window_of_its_mixture_once_and_records_both(phases: dict) -> None:
    two, root = phases["two"], phases["root"]
    assert two.steps_done == two.epoch_steps
    windows = [w for r in read_jsonl(root / "two" / "data_indices" / "rank0.jsonl") for m in r["windows"] for w in m]
    assert len(windows) == len(set(windows)) == two.epoch_steps * 4
    run_config = json.loads((root / "two" / "run_config.json").read_text())
    assert run_config["mixture"]["shards"] == str(phases["b"].resolve())
    assert run_config["init_from"]["mixture"]["shards"] == str(phases["a"].resolve())
    assert run_config["init_from"]["path"] == str(phases["one"].checkpoint.resolve())
    assert run_config["mixture"]["manifest_sha256"] != run_config["init_from"]["mixture"]["manifest_sha256"]
