"""Expert parallel trains the same MoE model on the same data as one process: 4 gloo ranks, fp32.

Run as a module under torchrun (`-m tests.trainer.test_expert_parallel SHARDS OUT`), this file is the
worker: one launch of 4 ranks trains each EP layout in turn (a fresh mesh per layout). Every layout
reads the same global batch as the single-process reference (`test_parallel_layouts.run_layout`), so
the losses of 6 steps agree within 1e-5 relative and the gathered gradients of step 1 within 1e-5
(the experts' included: split over `ep`, sharded over `dp_shard_mod_ep`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.test_parallel_layouts import STEPS, VOCAB, assert_matches_one_process, run_layout
from trainer.config import ModelConfig, get_preset
from trainer.expert_parallel import check_expert_parallel
from trainer.fsdp_train import parse_args
from trainer.mesh import ParallelDims

WORLD = 4
LAYOUTS: dict[str, ParallelDims] = {
    "ep2_fsdp2": ParallelDims(dp_shard=4, ep=2),  # 2 experts a rank, each pair sharded over 2 ranks
    "ep4": ParallelDims(dp_shard=4, ep=4),  # 1 expert a rank
    "hsdp2_ep2": ParallelDims(dp_replicate=2, dp_shard=2, ep=2),
}


def model_config() -> ModelConfig:
    """4 experts top-2 with the auxiliary loss, a shared expert, dropless (capacity is per rank's batch)."""
    tiny = get_preset("tiny", tie_embeddings=False)
    return replace(tiny, n_layers=2, moe_experts=4, moe_top_k=2, moe_shared_expert=True).with_vocab(VOCAB)


def worker(shards: Path, out: Path) -> None:
    from trainer.distributed import init_distributed, relayout, shutdown

    info = init_distributed("cpu")
    for name, dims in LAYOUTS.items():
        result = run_layout(relayout(info, dims), shards, "1F1B", model_config())
        torch.save(result, out / f"{name}.rank{info.rank}.pt")
    shutdown(info)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    from tests.support.trainer_inputs import synthetic_run_inputs, torchrun
    from trainer.distributed import init_distributed, shutdown

    shards = synthetic_run_inputs(tmp_path_factory.mktemp("ep_data"), vocab=VOCAB, n_docs=200, seq_len=32)[0]
    info = init_distributed("cpu")
    try:
        results: dict[str, dict] = {"reference": run_layout(info, shards, "1F1B", model_config())}
    finally:
        shutdown(info)
    root = tmp_path_factory.mktemp("ep")
    torchrun(["-m", "tests.trainer.test_expert_parallel", str(shards), str(root)], nproc=WORLD, timeout=600)
    for name in LAYOUTS:
        ranks = [torch.load(root / f"{name}.rank{r}.pt") for r in range(WORLD)]
        results[name] = {"losses": [r["losses"] for r in ranks], "grads": ranks[0]["grads"], "init": ranks[0]["init"]}
    return results


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_expert_parallel_matches_one_process(layouts: dict[str, dict], name: str) -> None:
    assert len(layouts["reference"]["losses"]) == STEPS
    assert_matches_one_process(layouts, name)
    ref_init = layouts["reference"]["init"]  # built on meta and initialised shard by shard: the same weights
    assert [n for n in ref_init if not torch.equal(layouts[name]["init"][n], ref_init[n])] == []


@pytest.mark.e2e
def test_ep_cli_epoch_with_a_resume_equals_one_process(tmp_path: Path) -> None:
    """`fsdp_train.py --ep 2` on 2 ranks, stopped at step 3 and resumed from its DCP checkpoint (experts
    saved whole: (E, F, D)), through the epoch to the HF export: one process's losses and export."""
    from safetensors.torch import load_file

    from tests.support.trainer_inputs import read_jsonl, synthetic_run_inputs, torchrun
    from trainer.fsdp_train import train

    shards, tok = synthetic_run_inputs(tmp_path, vocab=VOCAB, n_docs=30, seq_len=32)
    common = ["--shards", str(shards), "--tokenizer", str(tok), "--micro-batch", "2", "--lr", "3e-3",
              "--log-every", "1", "--no-verify-shards", "--moe-experts", "4", "--untied", "--no-bf16"]  # fmt: skip
    ep = ["trainer/fsdp_train.py", *common, "--out", str(tmp_path / "ep"), "--ep", "2", "--grad-accum", "2"]
    torchrun([*ep, "--max-steps", "3", "--checkpoint-every", "3"], nproc=2, timeout=300)
    torchrun([*ep, "--resume"], nproc=2, timeout=300)
    # the same global batch in one process: twice the accumulation
    one = train(parse_args([*common, "--out", str(tmp_path / "one"), "--grad-accum", "4", "--device", "cpu"]))
    losses = [r["loss"] for r in read_jsonl(tmp_path / "ep" / "metrics.jsonl") if "loss" in r]
    assert len(losses) == one.epoch_steps >= 5
    np.testing.assert_allclose(losses, [v for _, v in one.losses], rtol=1e-5, atol=0)
    ep_hf, one_hf = load_file(tmp_path / "ep" / "hf" / "model.safetensors"), load_file(one.hf_dir / "model.safetensors")
    assert ep_hf.keys() == one_hf.keys()
    assert max((ep_hf[k] - one_hf[k]).abs().max().item() for k in one_hf) < 1e-5


def test_ep_flag_splits_dp_shard_without_growing_the_world() -> None:
    cfg = parse_args(["--shards", "s", "--tokenizer", "t", "--out", "o", "--ep", "2", "--moe-experts", "4"])
    dims = ParallelDims.of(cfg).resolve(4)
    assert (dims.dp_shard, dims.ep, dims.dp_size, dims.world_size) == (4, 2, 4, 4)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (ParallelDims(dp_shard=4, ep=3), "--ep 3 must divide dp_shard 4"),
        (ParallelDims(dp_shard=2, tp=2, ep=2), "composes with FSDP / HSDP only"),
        (ParallelDims(ep=0), "--ep must be >= 1"),
    ],
)
def test_ep_degrees_that_do_not_fit_are_refused_in_one_line(dims: ParallelDims, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        dims.resolve(4)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("experts", "ep"), [(0, 2), (6, 4)])
def test_ep_needs_a_moe_model_with_a_multiple_of_its_experts(experts: int, ep: int) -> None:
    with pytest.raises(ValueError, match=f"--ep {ep} needs a MoE model"):
        check_expert_parallel(experts, ep)
    check_expert_parallel(experts, 1)


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
