"""Context parallel: the one-line refusals (CPU), and on >= 2 CUDA devices CP 2 trains like one process.

The GPU half runs as a module under torchrun (`-m tests.trainer.test_context_parallel SHARDS OUT`):
2 ranks at `--cp 2` (FSDP over dp_shard x cp, ring attention), fp32, the same global batch as
`test_parallel_layouts`; the reference is one CUDA process. Ring attention merges partial softmaxes
in another order than one kernel over the whole sequence, so the tolerance is 1e-4, not 1e-5.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.trainer.test_parallel_layouts import SEQ, VOCAB, assert_matches_one_process, model_config, run_layout
from trainer.config import ModelConfig
from trainer.context_parallel import check_supported
from trainer.mesh import ParallelDims

LAYOUTS = {"cp2": ParallelDims(dp_shard=1, cp=2)}


def cp_model_config() -> ModelConfig:
    """The layouts' model with as many kv heads as heads (the ring kernels take no GQA)."""
    cfg = model_config()
    return replace(cfg, n_kv_heads=cfg.n_heads)


@pytest.mark.parametrize(
    ("cfg", "pp", "masking", "message"),
    [
        (cp_model_config(), 1, True, "--document-masking with --cp 2 is unsupported"),
        (model_config(), 1, False, "needs n_kv_heads == n_heads"),
        (cp_model_config(), 2, False, "--cp 2 with --pp 2 is not wired"),
    ],
)
def test_what_ring_attention_cannot_do_is_refused_in_one_line(
    cfg: ModelConfig, pp: int, masking: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as err:
        check_supported(2, cfg, pp=pp, document_masking=masking)
    assert "\n" not in str(err.value)
    check_supported(1, cfg, pp=pp, document_masking=masking)  # cp 1: nothing to refuse


def worker(shards: Path, out: Path) -> None:
    from trainer.distributed import init_distributed, relayout, shutdown

    info = init_distributed("cuda")
    for name, dims in LAYOUTS.items():
        result = run_layout(relayout(info, dims), shards, "1F1B", cp_model_config())
        torch.save({k: _to_cpu(v) for k, v in result.items()}, out / f"{name}.rank{info.rank}.pt")
    shutdown(info)


def _to_cpu(value: object) -> object:
    return {n: t.cpu() for n, t in value.items()} if isinstance(value, dict) else value


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="context parallel needs >= 2 CUDA devices")
def test_cp2_matches_one_process(tmp_path: Path) -> None:
    from tests.support.trainer_inputs import synthetic_run_inputs, torchrun
    from trainer.distributed import init_distributed, shutdown

    shards, _ = synthetic_run_inputs(tmp_path, vocab=VOCAB, n_docs=200, seq_len=SEQ)
    torchrun(["-m", "tests.trainer.test_context_parallel", str(shards), str(tmp_path)], nproc=2, timeout=600)
    info = init_distributed("cuda")
    try:
        reference = {k: _to_cpu(v) for k, v in run_layout(info, shards, "1F1B", cp_model_config()).items()}
    finally:
        shutdown(info)
    ranks = [torch.load(tmp_path / f"cp2.rank{r}.pt") for r in range(2)]
    grads: dict[str, torch.Tensor] = {}
    for rank in ranks:
        grads.update(rank["grads"])
    got = {"losses": [r["losses"] for r in ranks], "grads": grads}
    assert_matches_one_process({"reference": reference, "cp2": got}, "cp2", rtol=1e-4, gtol=1e-4)


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
