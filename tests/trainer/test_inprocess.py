"""`train()` called in-process (as the pipeline does, one rank), checkpoints and offline export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import synthetic_run_inputs, word_tokenizer
from trainer.compat import IncompatibleShards
from trainer.fsdp_train import TrainConfig, parse_args, train
from trainer.optim import OptimConfig


def _cfg(shards: Path, tok: Path, out: Path, **kw: object) -> TrainConfig:
    base = {"micro_batch": 4, "grad_accum": 2, "optim": OptimConfig(lr=3e-3), "log_every": 1, "verify_shards": False}
    return TrainConfig(shards=shards, tokenizer=tok, out=out, **{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("inproc")
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=60, seq_len=32)
    return root, shards, tok


def test_in_process_run_stops_and_resumes_to_the_same_losses(inputs: tuple[Path, Path, Path]) -> None:
    root, shards, tok = inputs
    straight = train(_cfg(shards, tok, root / "a"))
    assert straight.steps_done == straight.epoch_steps >= 6
    first = train(_cfg(shards, tok, root / "b", max_steps=3, export_hf=False))
    assert first.steps_done == 3 and first.hf_dir is None
    rest = train(_cfg(shards, tok, root / "b", resume=True))
    assert first.losses + rest.losses == straight.losses
    assert rest.hf_dir is not None and (rest.hf_dir / "model.safetensors").is_file()


def test_resume_refuses_another_global_batch(inputs: tuple[Path, Path, Path]) -> None:
    root, shards, tok = inputs
    train(_cfg(shards, tok, root / "c", max_steps=2, export_hf=False))
    with pytest.raises(ValueError, match="global_batch"):
        train(_cfg(shards, tok, root / "c", micro_batch=2, resume=True))


def test_refuses_a_foreign_tokenizer(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, shards, _ = inputs
    other = word_tokenizer(tmp_path / "tokenizer.json", 96)
    other.write_text(other.read_text().replace("w1", "w1x"))
    with pytest.raises(IncompatibleShards):
        train(_cfg(shards, other, tmp_path / "out"))


def test_offline_export_of_a_checkpoint_matches_the_live_export(inputs: tuple[Path, Path, Path]) -> None:
    transformers = pytest.importorskip("transformers")
    from trainer.export_hf import main as export_main

    root, _, _ = inputs
    ckpt = sorted((root / "a" / "checkpoints").glob("step_*"))[-1]
    export_main(["--checkpoint", str(ckpt), "--out", str(root / "offline")])
    live = transformers.AutoModelForCausalLM.from_pretrained(root / "a" / "hf", dtype=torch.float32)
    offline = transformers.AutoModelForCausalLM.from_pretrained(root / "offline", dtype=torch.float32)
    x = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(live(x).logits, offline(x).logits)
    assert (root / "offline" / "tokenizer.json").is_file()


def test_cli_flags_mirror_the_config() -> None:
    cfg = parse_args(
        [
            "--shards",
            "s",
            "--tokenizer",
            "t.json",
            "--out",
            "o",
            "--no-bf16",
            "--ac",
            "full",
            "--max-steps",
            "5",
        ]
    )
    assert cfg.bf16 is False and cfg.ac == "full" and cfg.max_steps == 5 and cfg.shards == Path("s")
    assert cfg.optim == OptimConfig()


def test_optimizer_flags_fill_the_nested_config_and_the_flat_record() -> None:
    from trainer.train_config import OPTIM_FLAGS, flat_record

    flags = ["--lr", "1e-3", "--weight-decay", "0.05", "--warmup-steps", "7", "--schedule", "wsd"]
    flags += ["--min-lr-ratio", "0.2", "--wsd-decay-fraction", "0.3", "--grad-clip", "0.5", "--z-loss", "1e-4"]
    flags += ["--betas", "0.8", "0.99", "--optimizer", "muon", "--muon-momentum", "0.9", "--muon-qk-clip", "50"]
    cfg = parse_args(["--shards", "s", "--tokenizer", "t.json", "--out", "o", "--micro-batch", "3", *flags])
    expected = OptimConfig(
        lr=1e-3, weight_decay=0.05, warmup_steps=7, schedule="wsd", min_lr_ratio=0.2, wsd_decay_fraction=0.3,
        grad_clip=0.5, z_loss=1e-4, betas=(0.8, 0.99), optimizer="muon", muon_momentum=0.9, muon_qk_clip=50.0,
    )  # fmt: skip
    assert cfg.optim == expected and cfg.micro_batch == 3
    record = flat_record(cfg)
    assert "optim" not in record
    expected_flags = [1e-3, 0.05, 7, "wsd", 0.2, 0.3, 0.5, 1e-4, [0.8, 0.99], "muon", 0.9, 50.0]
    assert [record[k] for k in OPTIM_FLAGS] == expected_flags
    keys = list(record)  # the flags' order, optim's spelled out where the field sits
    assert keys[keys.index("grad_accum") + 1 : keys.index("seed")] == list(OPTIM_FLAGS)
    assert record["shards"] == "s" and record["val_shards"] is None


@pytest.mark.parametrize("ac", ["selective", "full"])
def test_activation_checkpointing_leaves_gradients_unchanged(ac: str) -> None:
    from trainer.config import get_preset
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine
    from trainer.optim import OptimConfig

    info = init_distributed("cpu")
    try:
        cfg = get_preset("tiny", qk_norm=True).with_vocab(96)
        batch = torch.randint(0, 96, (2, 33), generator=torch.Generator().manual_seed(0))
        grads = []
        for mode in ("none", ac):
            engine = TrainEngine(cfg, info, OptimConfig(), 10, bf16=False, ac=mode)  # type: ignore[arg-type]
            engine.train_step([batch, batch])
            named = engine.model.named_parameters()
            grads.append({n.replace("._checkpoint_wrapped_module", ""): p.grad for n, p in named})  # plain at 1 rank
        assert grads[0].keys() == grads[1].keys()
        for name in grads[0]:
            torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)
    finally:
        shutdown(info)
