"""The trainer under real `torchrun --nproc_per_node=2` (gloo): parity, exact resume, one epoch, learning.

Run as a module under torchrun (`-m tests.trainer.test_dist`), this file is the parity worker: it
trains with FSDP2 in fp32 and saves the full gradients, which the test compares with a
single-process loop written here without FSDP.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mixtures.reader import ShardReader
from trainer.config import get_preset
from trainer.data import EpochLoader, EpochPlan, WindowIndex
from trainer.engine import TrainEngine
from trainer.model import Transformer, lm_loss
from trainer.schedule import lr_factor

pytestmark = pytest.mark.e2e

PARITY_STEPS, MICRO, ACCUM, SEQ, LR, WARMUP = 3, 2, 2, 32, 3e-3, 2


def _cfg(vocab: int):
    return get_preset("tiny", qk_norm=True).with_vocab(vocab)


def parity_worker(shards: Path, vocab: int, out: Path) -> None:
    """FSDP2 over the torchrun group, fp32 params: PARITY_STEPS steps, then dump full grads."""
    from trainer.distributed import init_distributed, shutdown
    from trainer.optim import OptimConfig

    info = init_distributed("cpu")
    index = WindowIndex(ShardReader(shards), SEQ)
    plan = EpochPlan(index.num_windows, MICRO, ACCUM, info.world_size, SEQ)
    loader = EpochLoader(index, plan, info.rank, seed=0)
    engine = TrainEngine(_cfg(vocab), info, OptimConfig(lr=LR, warmup_steps=WARMUP), plan.steps, seed=0, bf16=False)
    losses = []
    for micro in loader:
        losses.append(float(engine.train_step([t for _, t in micro]).loss))
        if loader.step == PARITY_STEPS:
            break
    grads = {n: p.grad.full_tensor() for n, p in engine.model.named_parameters()}
    params = {n: p.detach().full_tensor() for n, p in engine.model.named_parameters()}
    sync = _sync_only_on_last_micro_batch(engine, next(iter(loader))[0][1])
    if info.is_main:
        torch.save({"grads": grads, "params": params, "losses": losses, "sync": sync}, out)
    shutdown(info)


def _sync_only_on_last_micro_batch(engine: TrainEngine, batch: torch.Tensor) -> dict[str, bool]:
    """FSDP2 writes the sharded .grad only when it reduce-scatters; without sync it keeps them unsharded."""
    from trainer.parallelize import set_gradient_sync

    model = engine.model
    model.zero_grad(set_to_none=True)
    state = {}
    for name, sync in (("first_micro_reduced", False), ("last_micro_reduced", True)):
        set_gradient_sync(model, sync)
        lm_loss(model(batch[:, :-1]), batch[:, 1:]).backward()
        state[name] = all(p.grad is not None for p in model.parameters())
    return state


def reference_run(shards: Path, vocab: int, world: int) -> dict:
    """The same steps in one process, fp32, no FSDP: one forward over the whole global batch."""
    torch.manual_seed(0)
    model = Transformer(_cfg(vocab))
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        lr=LR,
        betas=(0.9, 0.95),
    )
    index = WindowIndex(ShardReader(shards), SEQ)
    global_batch = MICRO * ACCUM * world
    total = index.num_windows // global_batch
    order = np.random.default_rng(0).permutation(index.num_windows)
    losses = []
    for step in range(PARITY_STEPS):
        for group in opt.param_groups:
            group["lr"] = LR * lr_factor(step, total, WARMUP)
        opt.zero_grad()
        batch = index.batch(order[step * global_batch : (step + 1) * global_batch])
        loss = lm_loss(model(batch[:, :-1]), batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    grads = {n: p.grad for n, p in model.named_parameters()}
    params = {n: p.detach() for n, p in model.named_parameters()}
    return {"grads": grads, "params": params, "losses": losses}


def test_fsdp2_gradients_match_single_process_fp32(tmp_path: Path) -> None:
    from tests.support.trainer_inputs import synthetic_run_inputs, torchrun

    shards, _ = synthetic_run_inputs(tmp_path, vocab=96, n_docs=120, seq_len=SEQ)
    torchrun(["-m", "tests.trainer.test_dist", str(shards), "96", str(tmp_path / "fsdp.pt")])
    fsdp = torch.load(tmp_path / "fsdp.pt")
    ref = reference_run(shards, 96, world=2)
    assert fsdp["grads"].keys() == ref["grads"].keys()
    grad_diff = max((fsdp["grads"][n] - ref["grads"][n]).abs().max().item() for n in ref["grads"])
    param_diff = max((fsdp["params"][n] - ref["params"][n]).abs().max().item() for n in ref["params"])
    print(f"grad parity after {PARITY_STEPS} steps: max|diff| grads {grad_diff:.3g}, params {param_diff:.3g}")
    assert grad_diff < 1e-5
    assert param_diff < 1e-5
    np.testing.assert_allclose(fsdp["losses"], ref["losses"], rtol=0, atol=1e-5)
    assert fsdp["sync"] == {"first_micro_reduced": False, "last_micro_reduced": True}


# --- the CLI: resume identity, checkpoints, one epoch ---------------------------------------------


def _cli(shards: Path, tok: Path, out: Path, *extra: str) -> list[dict]:
    from tests.support.trainer_inputs import read_jsonl, torchrun

    args = ["trainer/fsdp_train.py", "--shards", str(shards), "--tokenizer", str(tok), "--out", str(out)]
    base = [
        "--micro-batch",
        "2",
        "--grad-accum",
        "2",
        "--log-every",
        "1",
        "--lr",
        "3e-3",
        "--no-verify-shards",
    ]
    torchrun([*args, *base, *extra])
    return read_jsonl(out / "metrics.jsonl")


def _train_losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records if "loss" in r}


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One epoch (2N = 16 steps) straight; and N = 8 steps, a killed save left behind, resume, N more."""
    from tests.support.trainer_inputs import synthetic_run_inputs

    root = tmp_path_factory.mktemp("resume")
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=60, seq_len=32)
    ckpt = ["--checkpoint-every", "2", "--keep-checkpoints", "2", "--save-data-indices"]
    _cli(shards, tok, root / "straight", *ckpt)
    _cli(shards, tok, root / "split", *ckpt, "--max-steps", "8")
    # A save killed midway leaves its .tmp directory (part of the shards written, no rename).
    last = root / "split" / "checkpoints" / "step_000000008"
    partial = last.with_name("step_000000010.tmp")
    shutil.copytree(last, partial)
    shard_file = next(partial.glob("*.distcp"))
    shard_file.write_bytes(shard_file.read_bytes()[:100])
    _cli(shards, tok, root / "split", *ckpt, "--resume")
    return {"root": root, "shards": shards, "tok": tok}


def test_resume_reproduces_the_straight_run_exactly(resume_runs: dict[str, Path]) -> None:
    from tests.support.trainer_inputs import read_jsonl

    root = resume_runs["root"]
    straight = _train_losses(read_jsonl(root / "straight/metrics.jsonl"))
    split = _train_losses(read_jsonl(root / "split/metrics.jsonl"))
    assert len(straight) == 16 and sorted(split) == sorted(straight)
    mismatched = {s: (straight[s], split[s]) for s in straight if straight[s] != split[s]}
    print(f"resume identity: {len(straight)} steps, {len(mismatched)} differ")
    assert not mismatched
    from safetensors.torch import load_file

    a = load_file(root / "straight/hf/model.safetensors")
    b = load_file(root / "split/hf/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_keep_last_k_and_ignore_partial_saves(resume_runs: dict[str, Path]) -> None:
    ckpts = sorted(p.name for p in (resume_runs["root"] / "straight/checkpoints").iterdir())
    assert len(ckpts) == 2 and all(not n.endswith(".tmp") for n in ckpts)
    state = json.loads((resume_runs["root"] / "straight/checkpoints" / ckpts[-1] / "trainer_state.json").read_text())
    assert state["data"]["consumed_samples"] == state["step"] * state["data"]["global_batch"]
    assert not list((resume_runs["root"] / "split/checkpoints").glob("*.tmp"))  # the next save cleaned it


def test_every_window_is_seen_exactly_once_across_ranks(resume_runs: dict[str, Path]) -> None:
    from tests.support.trainer_inputs import read_jsonl

    root = resume_runs["root"]
    index = WindowIndex(ShardReader(resume_runs["shards"]), 32)
    for run in ("straight", "split"):
        seen: list[int] = []
        per_rank = []
        for rank in (0, 1):
            ids = [
                w
                for rec in read_jsonl(root / run / "data_indices" / f"rank{rank}.jsonl")
                for m in rec["windows"]
                for w in m
            ]
            per_rank.append(set(ids))
            seen += ids
        steps = max(rec["step"] for rec in read_jsonl(root / run / "data_indices" / "rank0.jsonl"))
        global_batch = 2 * 2 * 2
        assert len(seen) == len(set(seen)) == steps * global_batch  # no window twice
        assert not per_rank[0] & per_rank[1]  # disjoint slices per rank
        assert index.num_windows - len(seen) == index.num_windows % global_batch  # only the tail dropped
        assert set(seen) <= set(range(index.num_windows))


# --- learning on real text, and the exported checkpoint in transformers --------------------------


@pytest.fixture(scope="module")
def shakespeare_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One epoch of the tiny model (bf16, z-loss) over 400 kB of Shakespeare, last shard held out."""
    from tokenizers import Tokenizer

    from tests.support.trainer_inputs import bpe_tokenizer, shared_data, write_shards

    data = shared_data()
    if data is None or not (data / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("shared data (tinyshakespeare) not available")
    root = tmp_path_factory.mktemp("shakespeare")
    text = (data / "tinyshakespeare" / "input.txt").read_text()[:400_000]
    tok_path = bpe_tokenizer(root / "tok" / "tokenizer.json", text, vocab_size=512)
    tok = Tokenizer.from_file(str(tok_path))
    docs = [np.array([*e.ids, 0]) for e in tok.encode_batch(text.split("\n\n")) if e.ids]
    write_shards(root / "shards", docs, tok_path, seq_len=64, n_files=4)
    _cli(
        root / "shards",
        tok_path,
        root / "out",
        *("--micro-batch", "8", "--grad-accum", "1", "--log-every", "10", "--eval-every", "40"),
        *("--val-holdout-files", "1", "--val-batches", "8", "--z-loss", "1e-4", "--verify-shards"),
    )
    return root


def test_loss_goes_down_on_real_text(shakespeare_run: Path) -> None:
    from tests.support.trainer_inputs import read_jsonl

    records = read_jsonl(shakespeare_run / "out" / "metrics.jsonl")
    train = [r["loss"] for r in records if "loss" in r]
    val = [r["val_loss"] for r in records if "val_loss" in r]
    print(f"shakespeare: train loss {train[0]:.3f} -> {train[-1]:.3f}, val {val[0]:.3f} -> {val[-1]:.3f}")
    assert train[0] > np.log(512) - 0.5  # starts near uniform over the vocab
    assert train[-1] < train[0] - 1.0
    assert val[-1] < val[0]
    assert all(np.isfinite(r["mfu"]) and r["mfu"] > 0 and r["tokens_per_s"] > 0 for r in records if "loss" in r)


def test_hf_export_of_the_trained_model_matches_our_logits(shakespeare_run: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from trainer.config import ModelConfig
    from trainer.export_hf import load_checkpoint_model

    ckpt = sorted((shakespeare_run / "out" / "checkpoints").glob("step_*"))[-1]
    weights, state = load_checkpoint_model(ckpt)
    ours = Transformer(ModelConfig(**state["model_config"]))
    ours.load_state_dict(weights)
    hf = transformers.AutoModelForCausalLM.from_pretrained(shakespeare_run / "out" / "hf", dtype=torch.float32)
    tokens = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf(tokens).logits - ours.eval()(tokens)).abs().max().item()
    print(f"HF export (trained, {type(hf).__name__}): max|logits diff| {diff:.3g}")
    assert diff < 1e-4


if __name__ == "__main__":
    parity_worker(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
