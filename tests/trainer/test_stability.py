"""The loss-spike guard: outliers are skipped without touching the weights, streaks roll back to a checkpoint."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig
from trainer.stability import INJECT_ENV, SpikeConfig, SpikeGuard, injected_loss_scales


def _cfg(shards: Path, tok: Path, out: Path, **kw: object) -> TrainConfig:
    base = {"micro_batch": 4, "grad_accum": 2, "optim": OptimConfig(lr=3e-3), "log_every": 1, "verify_shards": False}
    return TrainConfig(shards=shards, tokenizer=tok, out=out, export_hf=False, **{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("stability")
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=60, seq_len=32)
    return root, shards, tok


@pytest.fixture(scope="module")
def clean(inputs: tuple[Path, Path, Path]) -> Path:
    """An uninjected run (window 4: the sigma rule is live from step 3, with a band of 50 std): the reference."""
    root, shards, tok = inputs
    train(_cfg(shards, tok, root / "clean", spike_window=4, spike_sigma=50.0))
    return root / "clean"


def _model_weights(checkpoint: Path, scratch: Path) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(checkpoint, scratch)
    return torch.load(scratch, weights_only=False)["model"]


def _spikes(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "metrics.jsonl") if "spike" in r]


def test_non_finite_values_are_skipped_from_the_first_step() -> None:
    guard = SpikeGuard(SpikeConfig())
    assert guard.check(float("nan"), 1.0).reason == "loss_not_finite"  # type: ignore[union-attr]
    assert guard.check(2.0, float("inf")).reason == "grad_norm_not_finite"  # type: ignore[union-attr]
    assert guard.in_a_row == 2 and not guard.losses
    assert guard.check(2.0, 1.0) is None and guard.in_a_row == 0


def test_sigma_rule_waits_for_half_a_window_and_keeps_skipped_values_out() -> None:
    guard = SpikeGuard(SpikeConfig(window=8, sigma=6.0, rollback_after=2))
    assert guard.check(100.0, 1.0) is None  # history 0 < 4: always accepted (OLMo-core)
    for loss in (4.0, 4.1, 3.9):
        assert guard.check(loss, 1.0) is None
    spike = guard.check(400.0, 1.0)
    history = [100.0, 4.0, 4.1, 3.9]
    expected = statistics.mean(history) + 6 * statistics.stdev(history)  # 28 + 6 * 48 = 316
    assert spike is not None and spike.reason == "loss_sigma" and spike.threshold == pytest.approx(expected)
    assert list(guard.losses) == [100.0, 4.0, 4.1, 3.9] and not guard.should_roll_back
    assert guard.check(4.0, 50.0).reason == "grad_norm_sigma"  # type: ignore[union-attr]
    assert guard.should_roll_back
    twin = SpikeGuard(guard.cfg)
    twin.load_state_dict(guard.state_dict())
    assert twin.state_dict() == guard.state_dict()


def test_config_and_hook_errors_are_one_line() -> None:
    with pytest.raises(ValueError, match="window"):
        SpikeConfig(window=1)
    with pytest.raises(ValueError, match="sigma"):
        SpikeConfig(sigma=0)
    assert injected_loss_scales({INJECT_ENV: "3:nan, 5:1e4"}) == {3: pytest.approx(math.nan, nan_ok=True), 5: 1e4}
    with pytest.raises(ValueError, match="STEP:FACTOR"):
        injected_loss_scales({INJECT_ENV: "3"})


def test_a_skipped_step_leaves_parameters_and_optimizer_state_bitwise_unchanged() -> None:
    from trainer.config import get_preset
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine

    info = init_distributed("cpu")
    try:
        engine = TrainEngine(get_preset("tiny").with_vocab(96), info, OptimConfig(lr=1e-2), 10, bf16=False)
        batch = torch.randint(0, 96, (2, 33), generator=torch.Generator().manual_seed(0))
        guard = SpikeGuard(SpikeConfig(window=4, sigma=50.0))  # 2-value history: a wide band
        for _ in range(3):
            assert engine.train_step([batch], guard).spike is None
        assert not engine.fsdp  # one fp32 rank: a plain module (trainer.engine)
        before = {n: p.detach().clone() for n, p in engine.model.named_parameters()}
        steps_before = [s["step"].clone() for s in engine.optimizer.state.values()]
        for scale in (float("nan"), 1e4):
            out = engine.train_step([batch], guard, loss_scale=scale)
            assert out.spike is not None
            for name, p in engine.model.named_parameters():
                assert torch.equal(p, before[name]), name
        assert [s["step"] for s in engine.optimizer.state.values()] == steps_before
        assert engine.scheduler.last_epoch == 5  # the schedule still advanced
        assert engine.train_step([batch], guard).spike is None
        assert not torch.equal(engine.model.tok_embeddings.weight, before["tok_embeddings.weight"])
    finally:
        shutdown(info)


def test_injected_spikes_are_skipped_recorded_and_the_run_finishes(
    inputs: tuple[Path, Path, Path], clean: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root, shards, tok = inputs
    assert _spikes(clean) == []
    clean_losses = [(r["step"], r["loss"]) for r in read_jsonl(clean / "metrics.jsonl") if "loss" in r]
    monkeypatch.setenv(INJECT_ENV, "3:nan,6:1e4")
    run = _cfg(shards, tok, root / "spiky", spike_window=4, spike_sigma=50.0, checkpoint_every=1, keep_checkpoints=20)
    spiky = train(run)
    assert spiky.steps_done == spiky.epoch_steps == clean_losses[-1][0]
    spikes = _spikes(root / "spiky")
    assert [(r["step"], r["spike"]) for r in spikes] == [(3, "loss_not_finite"), (6, "loss_sigma")]
    assert spikes[0]["spike_loss"] == "nan" and spikes[1]["spike_loss"] > 1e3
    ckpts = root / "spiky" / "checkpoints"
    for step in (3, 6):
        pair = [_model_weights(ckpts / f"step_{s:09d}", tmp_path / f"{s}.pt") for s in (step - 1, step)]
        assert pair[0].keys() == pair[1].keys()
        assert all(torch.equal(pair[0][k], pair[1][k]) for k in pair[0]), f"step {step} changed the weights"
    assert spiky.losses[:2] == clean_losses[:2]  # identical until the first spike


@pytest.mark.parametrize(
    "background", [False, pytest.param(True, marks=pytest.mark.e2e)], ids=["sync", "async_checkpoint"]
)
def test_a_streak_of_spikes_rolls_back_to_the_last_checkpoint(
    inputs: tuple[Path, Path, Path], clean: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, background: bool
) -> None:
    root, shards, tok = inputs
    monkeypatch.setenv(INJECT_ENV, "5:nan,6:nan")
    out = root / f"rollback_{background}"
    ckpt = {"checkpoint_every": 3, "keep_checkpoints": 20, "async_checkpoint": background}
    result = train(_cfg(shards, tok, out, **ckpt, spike_rollback_after=2))
    assert result.steps_done == result.epoch_steps
    records = read_jsonl(out / "metrics.jsonl")
    rollbacks = [r for r in records if "rollback" in r]
    global_batch = 4 * 2
    assert rollbacks == [
        {
            "step": 6,
            "rollback": str(out / "checkpoints" / "step_000000003"),
            "rollback_to_step": 3,
            "skipped_windows": [3 * global_batch, 6 * global_batch],
        }
    ]
    # step 4 was applied, then undone: the checkpoint written after the rollback holds step 3's weights
    at3, at6 = (_model_weights(out / "checkpoints" / f"step_{s:09d}", tmp_path / f"{s}.pt") for s in (3, 6))
    assert all(torch.equal(at3[k], at6[k]) for k in at3)
    lrs = {r["step"]: r["lr"] for r in records if "lr" in r}
    straight = {r["step"]: r["lr"] for r in read_jsonl(clean / "metrics.jsonl") if "lr" in r}
    assert lrs[7] == straight[7]  # the schedule kept its place after the rollback


def test_a_streak_without_a_checkpoint_stops_with_a_clear_error(
    inputs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, shards, tok = inputs
    monkeypatch.setenv(INJECT_ENV, "2:nan,3:nan")
    with pytest.raises(RuntimeError, match="no checkpoint to roll back to"):
        train(_cfg(shards, tok, root / "nockpt", spike_rollback_after=2))
