"""The meta-device build initialises shard by shard to exactly the weights of the old full-model init.

The reference is built the old way here: `torch.manual_seed(seed)` then `Transformer(cfg)` on CPU.
Run as a module under torchrun (`-m tests.trainer.test_materialize OUT`), this file is the 2-rank
worker: it builds the engine on every rank and saves the gathered weights and each rank's RNG state.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer.config import ModelConfig, get_preset
from trainer.engine import TrainEngine
from trainer.model import Transformer
from trainer.optim import OptimConfig

SEED = 3
# (config, activation checkpointing): tied, untied + QK-norm under AC (wrapped FQNs), and shapes
# that do not split evenly over 2 ranks (vocab 101, kv rows 20, ffn 45).
CASES: dict[str, tuple[ModelConfig, str]] = {
    "tiny_tied": (get_preset("tiny").with_vocab(96), "none"),
    "tiny_untied_qk_ac": (get_preset("tiny", qk_norm=True, tie_embeddings=False).with_vocab(96), "selective"),
    "uneven": (ModelConfig(dim=40, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=45, vocab_size=101), "full"),
    # mixture of experts: stacked (E, F, D) expert weights, a router, a shared expert, the bias buffer
    "moe": (replace(get_preset("tiny"), moe_experts=3, moe_top_k=2, moe_shared_expert=True).with_vocab(96), "full"),
}


def gathered_init(case: str, info: object) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(full weights on rank 0, RNG state after init, RoPE cos table) of the engine's sharded model."""
    cfg, ac = CASES[case]
    engine = TrainEngine(cfg, info, OptimConfig(), 10, seed=SEED, ac=ac)  # type: ignore[arg-type]
    rng = torch.get_rng_state()
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(engine.model, options=opts), rng, engine.model.rope_cos.clone()


def old_init(case: str) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Today's path before the meta build: the whole model on CPU after seeding."""
    torch.manual_seed(SEED)
    model = Transformer(CASES[case][0])
    return model.state_dict(), torch.get_rng_state(), model.rope_cos


def _assert_identical(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> None:
    assert sorted(new) == sorted(old)
    differ = [name for name in old if not torch.equal(new[name], old[name])]
    assert not differ, f"weights differ from the full-model init: {differ}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_build_matches_the_full_model_init_in_process(case: str) -> None:
    from trainer.distributed import init_distributed, shutdown

    info = init_distributed("cpu")
    try:
        weights, rng, rope = gathered_init(case, info)
    finally:
        shutdown(info)
    old_weights, old_rng, old_rope = old_init(case)
    _assert_identical(weights, old_weights)
    assert torch.equal(rng, old_rng)  # the random stream continues where it did (checkpoints save it)
    assert torch.equal(rope, old_rope)


def test_init_replays_each_constructor_draw() -> None:
    """Regression guard for the replay: dropping one constructor draw shifts every later weight."""
    from trainer.materialize import _InitReplay

    cfg = CASES["tiny_tied"][0]
    with torch.device("meta"):
        model = Transformer(cfg)
    replay = _InitReplay(model)
    replay.constructed = replay.constructed[1:]
    model.to_empty(device="cpu")
    replay.run(SEED, torch.device("cpu"))
    old, _, _ = old_init("tiny_tied")
    assert not torch.equal(model.tok_embeddings.weight, old["tok_embeddings.weight"])


@pytest.mark.e2e
def test_meta_build_matches_the_full_model_init_on_two_ranks(tmp_path: Path) -> None:
    from tests.support.trainer_inputs import torchrun

    torchrun(["-m", "tests.trainer.test_materialize", str(tmp_path)])
    for case in CASES:
        saved = torch.load(tmp_path / f"{case}.pt")
        old_weights, old_rng, old_rope = old_init(case)
        _assert_identical(saved["weights"], old_weights)
        assert len(saved["rng"]) == 2 and all(torch.equal(r, old_rng) for r in saved["rng"])
        assert torch.equal(saved["rope"], old_rope)


def worker(out: Path) -> None:
    import torch.distributed as dist

    from trainer.distributed import init_distributed, shutdown

    info = init_distributed("cpu")
    for case in CASES:
        weights, rng, rope = gathered_init(case, info)
        rngs: list[torch.Tensor | None] = [None] * info.world_size
        dist.all_gather_object(rngs, rng)
        if info.is_main:
            torch.save({"weights": weights, "rng": rngs, "rope": rope}, out / f"{case}.pt")
    shutdown(info)


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
