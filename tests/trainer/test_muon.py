"""Muon + AdamW (`trainer/muon.py`) against torch.optim.Muon and torch.optim.AdamW, in one process and on
FSDP2 shards under real torchrun (gloo, fp32).

Run as a module under torchrun (`-m tests.trainer.test_muon SHARDS OUT`), this file is the worker: it
trains two steps with the sharded engine and saves, per step, the full parameters before, the full
gradients and the learning rate, and the parameters after; the test replays each step with torch's own
optimizers on plain tensors.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.config import get_preset
from trainer.model import Transformer
from trainer.muon import build_muon, is_muon_param, newton_schulz
from trainer.optim import OptimConfig

LR, WD, BETAS, MOMENTUM = 3e-3, 0.1, (0.9, 0.95), 0.95
# a dense layer and a MoE layer (stacked (E, F, D) expert weights: one Muon matrix per expert)
CFG = replace(get_preset("tiny"), moe_experts=2, moe_top_k=1, moe_every=2).with_vocab(96)


def reference_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lr: float,
                   state: dict[str, object]) -> dict[str, torch.Tensor]:  # fmt: skip
    """One step of torch.optim.Muon (RMS matched to AdamW) + torch.optim.AdamW on plain tensors; a stacked
    expert tensor is E separate matrices. `state` keeps torch's optimizers between calls."""
    if not state:
        tensors = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
        matrices = {n: [torch.nn.Parameter(m.clone()) for m in p] if p.ndim == 3 else [tensors[n]]
                    for n, p in params.items() if is_muon_param(n, p)}  # fmt: skip
        adam_decay = [tensors[n] for n, p in params.items() if not is_muon_param(n, p) and p.ndim >= 2]
        adam_plain = [tensors[n] for n, p in params.items() if p.ndim < 2]
        state["tensors"], state["matrices"] = tensors, matrices
        state["opts"] = [
            torch.optim.Muon([m for ms in matrices.values() for m in ms], lr=lr, weight_decay=WD,
                             momentum=MOMENTUM, nesterov=True, adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW([{"params": adam_decay, "weight_decay": WD}, {"params": adam_plain, "weight_decay": 0.0}],
                              lr=lr, betas=BETAS, foreach=False),
        ]  # fmt: skip
    tensors, matrices = state["tensors"], state["matrices"]
    for n, t in tensors.items():  # type: ignore[union-attr]
        t.grad = grads[n].clone()
    for n, ms in matrices.items():  # type: ignore[union-attr]
        if grads[n].ndim == 3:
            for m, g in zip(ms, grads[n], strict=True):
                m.grad = g.clone()
    for opt in state["opts"]:  # type: ignore[union-attr]
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    out = {n: t.detach().clone() for n, t in tensors.items()}  # type: ignore[union-attr]
    for n, ms in matrices.items():  # type: ignore[union-attr]
        if params[n].ndim == 3:
            out[n] = torch.stack([m.detach() for m in ms])
    return out


def muon_worker(shards: Path, out: Path) -> None:
    """Two steps of the FSDP2 engine with --optimizer muon (fp32); rank 0 saves what each step saw."""
    from mixtures.reader import ShardReader
    from trainer.data import EpochLoader, EpochPlan, WindowIndex
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine

    info = init_distributed("cpu")
    index = WindowIndex(ShardReader(shards), 32)
    plan = EpochPlan(index.num_windows, 2, 2, info.world_size, 32)
    loader = EpochLoader(index, plan, info.rank, seed=0)
    optim = OptimConfig(lr=LR, weight_decay=WD, warmup_steps=2, optimizer="muon", muon_momentum=MOMENTUM)
    engine = TrainEngine(CFG, info, optim, plan.steps, seed=0, bf16=False)
    assert engine.fsdp
    steps = []
    for micro in loader:
        before = {n: p.detach().full_tensor() for n, p in engine.model.named_parameters()}
        result = engine.train_step([t for _, t in micro])
        grads = {n: p.grad.full_tensor() for n, p in engine.model.named_parameters()}
        after = {n: p.detach().full_tensor() for n, p in engine.model.named_parameters()}
        steps.append({"before": before, "grads": grads, "after": after, "lr": result.lr})
        if loader.step == 2:
            break
    if info.is_main:
        torch.save(steps, out)
    shutdown(info)


def test_newton_schulz_is_torch_muons_and_orthogonalises() -> None:
    from torch.optim._muon import _zeropower_via_newtonschulz

    g = torch.randn(48, 32, generator=torch.Generator().manual_seed(0))
    ours = newton_schulz(g)
    assert torch.equal(ours, _zeropower_via_newtonschulz(g, (3.4445, -4.7750, 2.0315), 5, 1e-7))
    singular = torch.linalg.svdvals(ours.float())
    assert 0.5 < singular.min() and singular.max() < 1.5  # ~ U V^T (Keller Jordan's quintic: S' in ~[0.7, 1.2])
    stacked = torch.randn(3, 32, 48, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(newton_schulz(stacked)[i], newton_schulz(stacked[i])) for i in range(3))


def test_one_process_steps_equal_torch_muon_and_adamw() -> None:
    torch.manual_seed(0)
    model = Transformer(CFG)
    opt = build_muon(model, LR, WD, BETAS, MOMENTUM)
    muon_names = {n for n, p in model.named_parameters() if is_muon_param(n, p)}
    assert "layers.1.feed_forward.experts.w1" in muon_names and "tok_embeddings.weight" not in muon_names
    state: dict[str, object] = {}
    worst = 0.0
    for step in range(3):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        model.zero_grad()
        model(torch.randint(0, 96, (4, 16), generator=torch.Generator().manual_seed(step))).square().mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        expected = reference_step(before, grads, LR, state)
        worst = max(worst, max((p.detach() - expected[n]).abs().max().item() for n, p in model.named_parameters()))
    print(f"Muon+AdamW vs torch.optim.Muon+AdamW, 3 steps in one process: max|param diff| {worst:.3g}")
    assert worst < 1e-6


@pytest.mark.e2e
@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_step_equals_the_single_process_reference(tmp_path: Path, ranks: int) -> None:
    from tests.support.trainer_inputs import torchrun

    shards, _ = synthetic_run_inputs(tmp_path, vocab=96, n_docs=120, seq_len=32)
    torchrun(["-m", "tests.trainer.test_muon", str(shards), str(tmp_path / "muon.pt")], nproc=ranks)
    steps = torch.load(tmp_path / "muon.pt")
    state: dict[str, object] = {}
    for i, step in enumerate(steps):
        if i:  # the reference carries its own parameters and optimizer state from the previous step
            torch.testing.assert_close(step["before"], steps[i - 1]["after"], rtol=0, atol=0)
        expected = reference_step(step["before"], step["grads"], step["lr"], state)
        diff = max((step["after"][n] - expected[n]).abs().max().item() for n in expected)
        moved = max((step["after"][n] - step["before"][n]).abs().max().item() for n in expected)
        print(f"{ranks} ranks, step {i + 1}: max|param diff| vs reference {diff:.3g} (update up to {moved:.3g})")
        assert diff < 1e-6 and moved > 1e-4


@pytest.mark.e2e
def test_muon_run_resumes_to_the_same_losses(tmp_path: Path) -> None:
    from trainer.fsdp_train import TrainConfig, train

    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=40, seq_len=32)

    def cfg(out: str, **kw: object) -> TrainConfig:
        base = {"micro_batch": 4, "grad_accum": 1, "log_every": 1, "verify_shards": False, "bf16": False,
                "export_hf": False, "max_steps": 6, "optim": OptimConfig(lr=3e-3, optimizer="muon")}  # fmt: skip
        return TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / out, **{**base, **kw})  # type: ignore[arg-type]

    straight = train(cfg("straight"))
    first = train(cfg("resumed", max_steps=3, checkpoint_every=3))
    rest = train(cfg("resumed", resume=True))
    assert first.losses + rest.losses == straight.losses  # momentum and AdamW moments are in the checkpoint


if __name__ == "__main__":
    muon_worker(Path(sys.argv[1]), Path(sys.argv[2]))
