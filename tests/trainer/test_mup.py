"""μP (`trainer/mup.py`): off it is SP; on, the init, the per-group LRs, the output and attention scales, the
coordinate check's flat activations, the HF export, the CLI's refusals, and FSDP2 on 2 gloo ranks.

Run as a module under torchrun (`-m tests.trainer.test_mup SHARDS OUT`), this file is the worker of the
FSDP2 test: a few μP steps of the sharded engine, the losses and full parameters saved by rank 0.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.support.trainer_inputs import synthetic_run_inputs
from tests.trainer.test_model import exported_logits_diff
from trainer.config import ModelConfig, get_preset
from trainer.model import Transformer
from trainer.muon import build_muon
from trainer.mup_check import CheckSpec, run, spread
from trainer.mup_check import main as mup_check_main
from trainer.optim import OptimConfig, build_optimizer

TINY = get_preset("tiny", vocab_size=128)  # dim 64, 4 heads (head_dim 16), 2 layers
LR, WD = 1e-3, 0.1


def _group_lrs(optimizer: torch.optim.Optimizer, model: Transformer) -> dict[str, tuple[float, float]]:
    """Parameter name -> (lr, weight decay) of its group."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}


def test_off_is_the_standard_parametrisation() -> None:
    torch.manual_seed(0)
    model = Transformer(TINY)
    assert type(model.output) is torch.nn.Linear and model.layers[0].attention.q_scale == 1.0
    groups = build_optimizer(model, LR, WD).param_groups
    assert [(len(g["params"]), g["lr"], g["weight_decay"]) for g in groups] == [(15, LR, WD), (5, LR, 0.0)]


def test_at_the_base_width_only_the_query_and_the_attention_scale_differ() -> None:
    """m = 1: SP's weights but a zero query; SP with q x 1/sqrt(head_dim) gives μP's logits (1/head_dim scores)."""
    torch.manual_seed(0)
    sp = Transformer(TINY)
    torch.manual_seed(0)
    mup = Transformer(replace(TINY, mup_base_dim=64))
    differ = {n for n, p in mup.state_dict().items() if not torch.equal(p, sp.state_dict()[n])}
    assert differ == {"layers.0.attention.wq.weight", "layers.1.attention.wq.weight"}
    assert all(not layer.attention.wq.weight.any() for layer in mup.layers)
    mup.load_state_dict(sp.state_dict())
    x = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for layer in sp.layers:
            layer.attention.wq.weight.mul_(1 / math.sqrt(TINY.head_dim))
        torch.testing.assert_close(mup(x), sp(x), rtol=0, atol=1e-6)


def test_init_lr_and_output_scale_with_the_width_multiplier() -> None:
    cfg = replace(TINY, dim=256, n_heads=4, n_kv_heads=4, ffn_dim=704, mup_base_dim=64)  # m = 4
    torch.manual_seed(0)
    model = Transformer(cfg)
    assert cfg.mup_width_mult == 4.0 and model.output.multiplier == 0.25
    assert abs(model.layers[0].feed_forward.w1.weight.std().item() - 0.02 / 2) < 5e-4  # std / sqrt(m)
    assert abs(model.tok_embeddings.weight.std().item() - 0.02) < 5e-4  # the embedding is SP's
    x = torch.randn(3, cfg.dim)
    torch.testing.assert_close(model.output(x), x @ model.tok_embeddings.weight.T / 4)
    lrs = _group_lrs(build_optimizer(model, LR, WD, mup_width_mult=4.0), model)
    assert lrs["layers.0.attention.wq.weight"] == (LR / 4, WD * 4)  # hidden: lr / m, lr * wd kept
    assert lrs["layers.1.feed_forward.w2.weight"] == (LR / 4, WD * 4)
    assert lrs["tok_embeddings.weight"] == (LR, WD) and lrs["norm.weight"] == (LR, 0.0)
    muon = _group_lrs(build_muon(model, LR, WD, (0.9, 0.95), mup_width_mult=4.0), model)
    assert muon["layers.0.attention.wq.weight"] == (LR / 2, WD * 2)  # Muon: lr / sqrt(m)
    assert muon["tok_embeddings.weight"] == (LR, WD)
    assert build_optimizer(model, LR, WD, mup_width_mult=4.0).param_groups[0]["lr"] == LR  # the logged LR


def test_coordinate_check_is_flat_under_mup_and_not_under_sp() -> None:
    spec = CheckSpec(widths=(32, 64, 128, 256), n_heads=2, steps=10, seeds=1)  # head_dim 16..128
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matmuls: two threads on a busy 2-core machine were 10x slower
    try:
        result = run(spec)
    finally:
        torch.set_num_threads(threads)
    layers = list(result["mup"][32])
    mup = {layer: spread(result["mup"], layer) for layer in layers}
    sp = {layer: spread(result["sp"], layer) for layer in layers}
    print("max/min across widths 32..256, muP:", {k: round(v, 2) for k, v in mup.items()})
    print("max/min across widths 32..256, SP: ", {k: round(v, 2) for k, v in sp.items()})
    assert max(mup.values()) < 2.0
    assert max(sp.values()) > 10.0  # SP's updates grow with width


def test_cached_generation_sees_the_mup_scales() -> None:
    """The evaluators' KV-cached forward (`evals.generate`) goes through `Attention.project` and the head: μP's
    scales included, it gives the full forward's logits."""
    from evals.generate import KVCache, forward_cached

    torch.manual_seed(0)
    model = Transformer(replace(TINY, dim=128, mup_base_dim=32)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
        ids = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(2))
        cache = KVCache(len(model.layers))
        stepped = [forward_cached(model, ids[:, :5], cache)] + [forward_cached(model, ids[:, i : i + 1], cache)
                                                                 for i in range(5, 9)]  # fmt: skip
        torch.testing.assert_close(torch.cat(stepped, dim=1), model(ids), rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", [{}, {"qk_norm": True}])
def test_hf_export_folds_the_mup_scales(tmp_path: Path, variant: dict) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = replace(TINY, dim=128, n_heads=4, n_kv_heads=2, mup_base_dim=32, **variant)
    torch.manual_seed(0)
    ours = Transformer(cfg).eval()
    with torch.no_grad():  # trained-looking weights: a query that is not zero, norm gains that are not 1
        for p in ours.parameters():
            p.add_(0.02 * torch.randn_like(p))
    arch = "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"
    assert exported_logits_diff(transformers, ours, cfg, tmp_path, arch) < 1e-4


def test_bad_base_widths_are_refused() -> None:
    for base in (48, 128, -1):
        with pytest.raises(ValueError, match="mup_base_dim must be (0|a whole number in \\[0, 65536\\])"):
            replace(TINY, mup_base_dim=base)


def test_cli_refuses_a_base_width_that_does_not_divide_dim(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=20, seq_len=32)
    argv = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "out"), "--mup-base-dim", "48"]
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.fsdp_train", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "mup_base_dim must be 0 (off) or a divisor of dim 64, got 48" in proc.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exit_:
        mup_check_main(["--widths", "64", "96", "--base-dim", "64", "--json", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: --base-dim 64 must divide") and err.count("\n") == 1
    assert not (tmp_path / "c.json").exists()


def mup_worker(shards: Path, out: Path, grad_accum: int) -> None:
    """Three fp32 steps of the engine with μP on (m = 2); rank 0 saves the losses and the full parameters."""
    from mixtures.reader import ShardReader
    from trainer.data import EpochLoader, EpochPlan, WindowIndex
    from trainer.distributed import init_distributed, shutdown
    from trainer.engine import TrainEngine

    info = init_distributed("cpu")
    index = WindowIndex(ShardReader(shards), 32)
    plan = EpochPlan(index.num_windows, 4, grad_accum, info.world_size, 32)
    loader = EpochLoader(index, plan, info.rank, seed=0)
    engine = TrainEngine(FSDP_CFG, info, OptimConfig(lr=1e-2, warmup_steps=1), plan.steps, seed=0, bf16=False)
    losses = []
    for micro in loader:
        losses.append(float(engine.train_step([t for _, t in micro]).loss))
        if loader.step == 3:
            break
    params = {n: p.detach().full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()
              for n, p in engine.model.named_parameters()}  # fmt: skip
    if info.is_main:
        torch.save({"losses": losses, "params": params, "fsdp": engine.fsdp,
                    "lrs": [g["lr"] for g in engine.optimizer.param_groups]}, out)  # fmt: skip
    shutdown(info)


FSDP_CFG = replace(get_preset("tiny"), mup_base_dim=32).with_vocab(96)  # m = 2


@pytest.mark.e2e
def test_fsdp2_on_two_ranks_equals_one_process(tmp_path: Path) -> None:
    from tests.support.trainer_inputs import torchrun

    shards, _ = synthetic_run_inputs(tmp_path, vocab=96, n_docs=120, seq_len=32)
    torchrun(["-m", "tests.trainer.test_mup", str(shards), str(tmp_path / "one.pt"), "2"], nproc=1)
    torchrun(["-m", "tests.trainer.test_mup", str(shards), str(tmp_path / "two.pt"), "1"], nproc=2)
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert not one["fsdp"] and two["fsdp"]
    diff = max((one["params"][n] - two["params"][n]).abs().max().item() for n in one["params"])
    print(f"μP, 3 steps: losses 1 process {one['losses']}, 2 ranks {two['losses']}; max|param diff| {diff:.3g}")
    assert max(abs(a - b) for a, b in zip(one["losses"], two["losses"], strict=True)) < 1e-5 and diff < 1e-5
    assert one["losses"][-1] < one["losses"][0]
    lrs = two["lrs"]  # the hidden matrices' group trains at lr / m on the sharded parameters too
    assert lrs[-1] == pytest.approx(lrs[0] / FSDP_CFG.mup_width_mult)


def test_the_flag_and_the_model_yaml_set_the_base_width(tmp_path: Path) -> None:
    from trainer.fsdp_train import parse_args
    from trainer.model_spec import model_config, model_label

    args = parse_args(["--shards", "s", "--tokenizer", "t", "--out", "o", "--mup-base-dim", "32"])
    assert model_config(args, 96, 32).mup_base_dim == 32 and model_label(args) == "tiny with --mup-base-dim 32"
    path = tmp_path / "m.yaml"
    path.write_text("dim: 128\nn_layers: 2\nn_heads: 4\nffn_dim: 512\nmup_base_dim: 64\n")
    cfg = model_config(parse_args(["--shards", "s", "--tokenizer", "t", "--out", "o", "--model", str(path)]), 96, 32)
    assert cfg.mup_width_mult == 2.0 and ModelConfig(**cfg.to_dict()) == cfg  # checkpoints carry it


if __name__ == "__main__":
    mup_worker(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
