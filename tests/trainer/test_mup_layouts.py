"""μP under tensor and pipeline parallel: `--mup-base-dim` with `--tp 2` and with `--pp 2` trains as one process.

Run as a module under torchrun (`-m tests.trainer.test_mup_layouts SHARDS OUT`), this file is the worker:
one launch of 2 gloo ranks trains the μP model (m = 2) under TP 2 (the head's logits vocab-sharded, so
`Readout`'s 1/m multiplies a sharded DTensor) and then PP 2 (each stage builds its own AdamW groups, the
hidden matrices at lr / m), with the harness and tolerances of `test_parallel_layouts`: the losses of 6
fp32 steps within 1e-5 relative of one process, step 1's gathered gradients within 1e-5, and the meta
init under each layout bit-identical to the full μP model's init.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.trainer.test_parallel_layouts import (
    _launch,
    _single_process,
    assert_init_is_full_model_init,
    assert_matches_one_process,
    model_config,
    run_layout,
)
from trainer.config import ModelConfig
from trainer.mesh import ParallelDims

pytestmark = pytest.mark.e2e

MUP_LAYOUTS: dict[str, tuple[ParallelDims, str]] = {
    "mup_tp2": (ParallelDims(dp_shard=1, tp=2), "1F1B"),
    "mup_pp2": (ParallelDims(dp_shard=1, pp=2), "1F1B"),
}


def mup_config() -> ModelConfig:
    """`test_parallel_layouts`' model (4 blocks, untied, QK-norm) with μP at width multiplier 2."""
    return replace(model_config(), mup_base_dim=model_config().dim // 2)


def worker(shards: Path, out: Path) -> None:
    import torch

    from trainer.distributed import init_distributed, relayout, shutdown

    info = init_distributed("cpu")
    for name, (dims, schedule) in MUP_LAYOUTS.items():
        result = run_layout(relayout(info, dims), shards, schedule, mup_config())
        torch.save(result, out / f"{name}.rank{info.rank}.pt")
    shutdown(info)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    from tests.support.trainer_inputs import synthetic_run_inputs
    from tests.trainer.test_parallel_layouts import SEQ, VOCAB

    shards = synthetic_run_inputs(tmp_path_factory.mktemp("mup_layout_data"), vocab=VOCAB, n_docs=200, seq_len=SEQ)[0]
    launched = _launch(tmp_path_factory.mktemp("mup_layouts"), shards, 2, __name__, list(MUP_LAYOUTS))
    return {**launched, "reference": _single_process(shards, mup_config())}


@pytest.mark.parametrize("name", list(MUP_LAYOUTS))
def test_mup_layout_matches_one_process(layouts: dict[str, dict], name: str) -> None:
    assert mup_config().mup_width_mult == 2.0
    assert_matches_one_process(layouts, name)
    assert_init_is_full_model_init(layouts[name]["init"], mup_config())


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
