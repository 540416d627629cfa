"""MuonClip's QK-clip (`trainer/qk_clip.py`) against a plain reference that computes every logit, in one
process and on FSDP2 shards under real torchrun (gloo, fp32).

Run as a module under torchrun (`-m tests.trainer.test_qk_clip OUT`), this file is the worker: for a
multi-head and a grouped-query model it runs one training forward of each rank's rows on the sharded
engine, clips, and saves the full weights before and after with every rank's tokens; the test recomputes
the logits of all the rows from the full weights and rescales them itself.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.config import ModelConfig
from trainer.model import Attention, Transformer, apply_rope, document_layout, head_max_logits
from trainer.optim import OptimConfig
from trainer.qk_clip import qk_clip, track_qk_max

# init_std 0.5: logits of a few units, so a tau between the heads' maxima clips some heads and not others
MHA = ModelConfig(dim=24, n_layers=2, n_heads=3, n_kv_heads=3, ffn_dim=32, vocab_size=64, max_seq_len=16,
                  init_std=0.5)  # fmt: skip
GQA = ModelConfig(dim=24, n_layers=2, n_heads=3, n_kv_heads=1, ffn_dim=32, vocab_size=64, max_seq_len=16,
                  init_std=0.5)  # fmt: skip
CONFIGS = {"mha": MHA, "gqa": GQA}
ROWS_PER_RANK, SEQ = 2, 16


def reference_logit_maxima(weights: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """(layers, heads): every logit q.k / sqrt(hd) of every row computed at once from the weights, causal."""
    model = Transformer(cfg)
    model.load_state_dict(weights)
    inputs: list[torch.Tensor] = []
    hooks = [layer.attention.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
             for layer in model.layers]  # fmt: skip
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    b, t, hd = tokens.shape[0], tokens.shape[1], cfg.head_dim
    cos, sin = model.rope_cos[:t], model.rope_sin[:t]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    out = []
    for i, x in enumerate(inputs):
        q = (x @ weights[f"layers.{i}.attention.wq.weight"].T).view(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = (x @ weights[f"layers.{i}.attention.wk.weight"].T).view(b, t, cfg.n_kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kv_of = [h * cfg.n_kv_heads // cfg.n_heads for h in range(cfg.n_heads)]
        logits = torch.einsum("bhid,bhjd->bhij", q, k[:, kv_of]) / math.sqrt(hd)
        out.append(logits.masked_fill(future, -math.inf).amax(dim=(0, 2, 3)))
    return torch.stack(out)


def reference_clip(weights: dict[str, torch.Tensor], cfg: ModelConfig, maxima: torch.Tensor,
                   tau: float) -> dict[str, torch.Tensor]:  # fmt: skip
    """Kimi K2's rescale on full weights: MHA q and k rows x sqrt(tau / S_h), GQA q rows x tau / S_h."""
    out = dict(weights)
    hd = cfg.head_dim
    for i, heads in enumerate(maxima):
        wq, wk = weights[f"layers.{i}.attention.wq.weight"].clone(), weights[f"layers.{i}.attention.wk.weight"].clone()
        for h, s in enumerate(heads.tolist()):
            if s <= tau:
                continue
            if cfg.n_kv_heads == cfg.n_heads:
                wq[h * hd : (h + 1) * hd] *= math.sqrt(tau / s)
                wk[h * hd : (h + 1) * hd] *= math.sqrt(tau / s)
            else:
                wq[h * hd : (h + 1) * hd] *= tau / s
        out[f"layers.{i}.attention.wq.weight"], out[f"layers.{i}.attention.wk.weight"] = wq, wk
    return out


def middle_tau(maxima: torch.Tensor) -> float:
    """A tau between the heads' maxima: some heads are clipped, some are not."""
    return float(maxima.flatten().sort().values[maxima.numel() // 2])


def _tokens(rows: int) -> torch.Tensor:
    return torch.randint(0, 64, (rows, SEQ), generator=torch.Generator().manual_seed(0))


def clip_worker(out: Path) -> None:
    """Per model: one training forward of this rank's rows on the FSDP2 engine, the clip; rank 0 saves."""
    import torch.distributed as dist

    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine

    info = init_distributed("cpu")
    saved = {}
    for name, cfg in CONFIGS.items():
        optim = OptimConfig(optimizer="muon", muon_qk_clip=1.0)  # turns the tracking on; tau is picked below
        engine = TrainEngine(cfg, info, optim, 4, seed=0, bf16=False, fsdp=True)
        tokens = _tokens(ROWS_PER_RANK * info.world_size)
        before = {n: p.detach().full_tensor().clone() for n, p in engine.model.state_dict().items()}  # 1 rank: no copy
        engine.model(tokens[info.rank * ROWS_PER_RANK : (info.rank + 1) * ROWS_PER_RANK])
        seen = torch.stack([a.qk_max for a in engine.model.modules() if isinstance(a, Attention)])
        dist.all_reduce(seen, op=dist.ReduceOp.MAX)
        tau = middle_tau(seen)
        stats = qk_clip(engine.model, tau, info.world_size)
        assert stats is not None
        after = {n: p.detach().full_tensor() for n, p in engine.model.state_dict().items()}
        saved[name] = {"tokens": tokens, "before": before, "after": after, "tau": tau, "maxima": stats.maxima}
    if info.is_main:
        torch.save(saved, out)
    shutdown(info)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in b)


def test_head_max_logits_equal_every_logit_computed() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 37, 8, generator=g), torch.randn(2, 2, 37, 8, generator=g)
    tokens = torch.randint(0, 5, (2, 37), generator=g)
    mask, _ = document_layout(tokens, eot=0)
    full = torch.einsum("bhid,bhjd->bhij", q, k.repeat_interleave(2, dim=1)) / math.sqrt(8)
    causal = torch.ones(37, 37, dtype=torch.bool).tril()
    for allowed, given in ((causal, None), (mask, mask)):
        expected = full.masked_fill(~allowed, -math.inf).amax(dim=(0, 2, 3))
        for block in (2**24, 2 * 4 * 37 * 5):  # one block, and blocks of 5 query rows
            torch.testing.assert_close(head_max_logits(q, k, given, block), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_process_clip_equals_the_reference_and_caps_the_next_forward(name: str) -> None:
    cfg = CONFIGS[name]
    torch.manual_seed(0)
    model = Transformer(cfg)
    track_qk_max(model, torch.device("cpu"))
    tokens = _tokens(4)
    before = {n: t.detach().clone() for n, t in model.state_dict().items()}
    model(tokens)
    expected_maxima = reference_logit_maxima(before, cfg, tokens)
    tau = middle_tau(expected_maxima)
    stats = qk_clip(model, tau, world_size=1)
    assert stats is not None
    torch.testing.assert_close(stats.maxima, expected_maxima, rtol=0, atol=1e-5)
    diff = _max_diff(model.state_dict(), reference_clip(before, cfg, expected_maxima, tau))
    assert diff < 1e-6
    record = stats.record()
    assert record["qk_clipped_heads"] == int((expected_maxima > tau).sum()) > 0
    assert record["qk_max"] == pytest.approx(float(expected_maxima.max()), abs=1e-5)
    with torch.no_grad():
        model(tokens)  # the same rows again: layer 0 sees the same input, so its heads now peak at most at tau
    after = torch.stack([a.qk_max for a in model.modules() if isinstance(a, Attention)])
    print(f"{name}: tau {tau:.3f}, maxima {expected_maxima.flatten().tolist()} -> {after.flatten().tolist()}")
    assert float(after[0].max()) <= tau * (1 + 1e-5)
    clipped = expected_maxima[0] > tau
    torch.testing.assert_close(after[0][clipped], torch.full_like(after[0][clipped], tau), rtol=1e-5, atol=0)
    torch.testing.assert_close(after[0][~clipped], expected_maxima[0][~clipped], rtol=0, atol=1e-5)
    # later layers' inputs moved with layer 0's clip: their maxima are measured again, no longer exactly tau


def test_off_tracks_nothing_and_tracking_changes_no_number() -> None:
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine

    info = init_distributed("cpu")
    try:
        engine = TrainEngine(MHA, info, OptimConfig(optimizer="muon"), 4, seed=0, bf16=False)
        assert all(a.qk_max is None for a in engine.model.modules() if isinstance(a, Attention))
        assert engine.after_update(True) is None
    finally:
        shutdown(info)
    torch.manual_seed(0)
    plain = Transformer(MHA)
    tracked = Transformer(MHA)
    tracked.load_state_dict(plain.state_dict())
    track_qk_max(tracked, torch.device("cpu"))
    tokens = _tokens(2)
    for model in (plain, tracked):
        model(tokens).square().mean().backward()
    assert torch.equal(plain(tokens), tracked(tokens))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(plain.parameters(), tracked.parameters(), strict=True))


def test_cli_refuses_qk_clip_without_muon_or_with_qk_norm(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from trainer.fsdp_train import main

    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=20, seq_len=32)
    base = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "out"), "--muon-qk-clip", "50"]
    cases = {"--muon-qk-clip is MuonClip's: it needs --optimizer muon": [],
             "--muon-qk-clip does not apply with --qk-norm": ["--optimizer", "muon", "--qk-norm"]}  # fmt: skip
    for message, extra in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main([*base, *extra])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("ranks", [1, 2])
def test_sharded_clip_equals_the_single_process_reference(tmp_path: Path, ranks: int) -> None:
    from tests.support.trainer_inputs import torchrun

    torchrun(["-m", "tests.trainer.test_qk_clip", str(tmp_path / "clip.pt")], nproc=ranks)
    for name, run in torch.load(tmp_path / "clip.pt").items():
        cfg = CONFIGS[name]
        maxima = reference_logit_maxima(run["before"], cfg, run["tokens"])  # every rank's rows, all logits
        torch.testing.assert_close(run["maxima"], maxima, rtol=0, atol=1e-5)
        diff = _max_diff(run["after"], reference_clip(run["before"], cfg, maxima, run["tau"]))
        moved = _max_diff(run["after"], run["before"])
        print(f"{ranks} rank(s), {name}: max|weight diff| vs reference {diff:.3g} (clip moved up to {moved:.3g})")
        assert diff < 1e-6 and moved > 1e-2


@pytest.mark.e2e
def test_muonclip_run_logs_qk_max_and_resumes_exactly(tmp_path: Path) -> None:
    from trainer.fsdp_train import TrainConfig, train

    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=40, seq_len=32)
    optim = OptimConfig(lr=3e-3, optimizer="muon", muon_qk_clip=1e-3)  # tiny tau: every step clips

    def cfg(out: str, **kw: object) -> TrainConfig:
        base = {"micro_batch": 4, "grad_accum": 1, "log_every": 1, "verify_shards": False, "bf16": False,
                "export_hf": False, "max_steps": 4, "optim": optim}  # fmt: skip
        return TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / out, **{**base, **kw})  # type: ignore[arg-type]

    def records(out: str) -> list[dict[str, object]]:
        lines = (tmp_path / out / "metrics.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if "qk_max" in r]

    straight = train(cfg("straight"))
    first = train(cfg("resumed", max_steps=2, checkpoint_every=2))
    rest = train(cfg("resumed", resume=True))
    assert first.losses + rest.losses == straight.losses  # the clipped weights are the checkpoint's
    logged = records("straight")
    assert [r["step"] for r in logged] == [1, 2, 3, 4] and all(r["qk_clipped_heads"] > 0 for r in logged)
    assert [r["qk_max"] for r in records("resumed")] == [r["qk_max"] for r in logged]


if __name__ == "__main__":
    clip_worker(Path(sys.argv[1]))
