"""Every layout of the mesh trains the same model on the same data as one process: 4 gloo ranks, fp32.

Run as a module under torchrun (`-m tests.trainer.test_parallel_layouts SHARDS OUT`), this file
is the worker: one launch trains each layout in turn on the same 4 processes (a fresh mesh per
layout), so the slow part, starting 4 ranks on 2 cores, is paid once; a second launch of 8 ranks
runs HSDP 2 x 2 x TP 2. Every layout reads the same
global batch (micro-batch x accumulation x data-parallel degree = 16 windows), so all of them are
compared with one single-process run of the engine: the losses of 6 steps within 1e-5 relative and
the gathered gradients of step 1 within 1e-5.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from mixtures.reader import ShardReader
from trainer.config import ModelConfig, get_preset
from trainer.data import EpochLoader, EpochPlan, WindowIndex
from trainer.distributed import DistInfo
from trainer.engine import TrainEngine
from trainer.mesh import ParallelDims
from trainer.model import Transformer
from trainer.optim import OptimConfig

pytestmark = pytest.mark.e2e

STEPS, MICRO, SEQ, GLOBAL, VOCAB = 6, 2, 32, 16, 96
# name -> (degrees, pipeline schedule); accumulation = GLOBAL / (MICRO x data-parallel degree)
LAYOUTS: dict[str, tuple[ParallelDims, str]] = {
    "fsdp4": (ParallelDims(dp_shard=4), "1F1B"),
    "hsdp2x2": (ParallelDims(dp_replicate=2, dp_shard=2), "1F1B"),
    "fsdp2_tp2": (ParallelDims(dp_shard=2, tp=2), "1F1B"),
    "pp2_fsdp2": (ParallelDims(pp=2, dp_shard=2), "1F1B"),
    "pp2_fsdp2_interleaved": (ParallelDims(pp=2, dp_shard=2), "Interleaved1F1B"),
    "pp2_fsdp2_zero_bubble": (ParallelDims(pp=2, dp_shard=2), "InterleavedZeroBubble"),
    "pp2_tp2": (ParallelDims(pp=2, dp_shard=1, tp=2), "1F1B"),
}
# 8 ranks (a second launch, kept to the one layout that needs them): HSDP x TP
LAYOUTS_8: dict[str, tuple[ParallelDims, str]] = {
    "hsdp2x2_tp2": (ParallelDims(dp_replicate=2, dp_shard=2, tp=2), "1F1B"),
}
LAYOUTS_BY_WORLD = {4: LAYOUTS, 8: LAYOUTS_8}


def model_config() -> ModelConfig:
    """4 blocks (two stages per rank under interleaved PP), untied (PP), QK-norm (its TP style)."""
    return replace(get_preset("tiny", qk_norm=True, tie_embeddings=False), n_layers=4).with_vocab(VOCAB)


def run_layout(info: DistInfo, shards: Path, schedule: str, cfg: ModelConfig | None = None) -> dict:
    """STEPS steps of the engine under `info`'s layout: the initial weights, the losses, step 1's gradients."""
    index = WindowIndex(ShardReader(shards), SEQ)
    accum = GLOBAL // (MICRO * info.dp_size)
    plan = EpochPlan(index.num_windows, MICRO, accum, info.dp_size, SEQ)
    loader = EpochLoader(index, plan, info.dp_rank, seed=0)
    optim = OptimConfig(lr=3e-3, warmup_steps=2)
    engine = TrainEngine(cfg or model_config(), info, optim, plan.steps, seed=0, bf16=False, pp_schedule=schedule)  # type: ignore[arg-type]
    init = {n: _full(p) for n, p in engine.model.named_parameters()}
    losses, grads = [], {}
    for micro in loader:
        losses.append(float(engine.train_step([t for _, t in micro]).loss))
        if loader.step == 1:  # gradients stay in place after the step
            grads = {n: _full(p.grad) for n, p in engine.model.named_parameters()}
        if loader.step == STEPS:
            break
    return {"init": init, "losses": losses, "grads": grads}


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def worker(shards: Path, out: Path) -> None:
    from trainer.distributed import init_distributed, relayout, shutdown

    info = init_distributed("cpu")
    for name, (dims, schedule) in LAYOUTS_BY_WORLD[info.world_size].items():
        torch.save(run_layout(relayout(info, dims), shards, schedule), out / f"{name}.rank{info.rank}.pt")
    shutdown(info)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.trainer_inputs import synthetic_run_inputs

    return synthetic_run_inputs(tmp_path_factory.mktemp("layout_data"), vocab=VOCAB, n_docs=200, seq_len=SEQ)[0]


@pytest.fixture(scope="module")
def reference(shards: Path) -> dict:
    return _single_process(shards)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory, shards: Path, reference: dict) -> dict[str, dict]:
    return {**_launch(tmp_path_factory.mktemp("layouts"), shards, 4), "reference": reference}


@pytest.fixture(scope="module")
def layouts_8(tmp_path_factory: pytest.TempPathFactory, shards: Path, reference: dict) -> dict[str, dict]:
    return {**_launch(tmp_path_factory.mktemp("layouts8"), shards, 8), "reference": reference}


def _launch(
    root: Path,
    shards: Path,
    world: int,
    worker_module: str = "tests.trainer.test_parallel_layouts",
    names: list[str] | None = None,
) -> dict[str, dict]:
    """One torchrun of `world` gloo ranks running `worker_module` (this file's `worker`: each layout of
    LAYOUTS_BY_WORLD[world]); the results of the layouts `names` (default: those) it saved under `root`."""
    from tests.support.trainer_inputs import torchrun

    torchrun(["-m", worker_module, str(shards), str(root)], nproc=world, timeout=900)
    results = {}
    for name in names or LAYOUTS_BY_WORLD[world]:
        ranks = [torch.load(root / f"{name}.rank{r}.pt") for r in range(world)]
        grads: dict[str, torch.Tensor] = {}
        init: dict[str, torch.Tensor] = {}
        for rank in ranks:  # under PP each rank holds its stages' parameters
            grads.update(rank["grads"])
            init.update(rank["init"])
        results[name] = {"losses": [r["losses"] for r in ranks], "grads": grads, "init": init}
    return results


def _single_process(shards: Path, cfg: ModelConfig | None = None) -> dict:
    """The same global batch in one process: MICRO-window micro-batches, GLOBAL / MICRO accumulated."""
    from trainer.distributed import init_distributed, shutdown

    info = init_distributed("cpu")
    try:
        return run_layout(info, shards, "1F1B", cfg)
    finally:
        shutdown(info)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_matches_one_process(layouts: dict[str, dict], name: str) -> None:
    assert_matches_one_process(layouts, name)


@pytest.mark.parametrize("name", list(LAYOUTS_8))
def test_layout_on_8_ranks_matches_one_process(layouts_8: dict[str, dict], name: str) -> None:
    """HSDP 2 x 2 x TP 2: replicate across, shard within, tensor-split inside each shard group."""
    assert_matches_one_process(layouts_8, name)
    assert_init_is_full_model_init(layouts_8[name]["init"])


def assert_matches_one_process(layouts: dict[str, dict], name: str, rtol: float = 1e-5, gtol: float = 1e-5) -> None:
    ref, got = layouts["reference"], layouts[name]
    assert len(ref["losses"]) == STEPS
    for rank_losses in got["losses"]:  # every rank reports the step's global mean
        np.testing.assert_allclose(rank_losses, ref["losses"], rtol=rtol, atol=0)
    assert got["grads"].keys() == ref["grads"].keys()
    diff = max((got["grads"][n] - ref["grads"][n]).abs().max().item() for n in ref["grads"])
    rel = max(abs(a - b) / abs(b) for a, b in zip(got["losses"][0], ref["losses"], strict=True))
    print(f"{name}: max rel loss diff {rel:.2g}, max |grad diff| step 1 {diff:.2g}")
    assert diff < gtol


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_meta_init_under_layout_is_the_full_model_init(layouts: dict[str, dict], name: str) -> None:
    """Built on meta, split by the layout, initialised shard by shard: bit for bit the old full-model init."""
    assert_init_is_full_model_init(layouts[name]["init"])


def assert_init_is_full_model_init(new: dict[str, torch.Tensor], cfg: ModelConfig | None = None) -> None:
    torch.manual_seed(0)
    old = Transformer(cfg or model_config()).state_dict()
    assert new.keys() == old.keys()
    assert [n for n in old if not torch.equal(new[n], old[n])] == []


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
