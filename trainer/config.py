"""Model shapes by name, so a run, the planner and the exporter all agree on what "1B" means."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

# Bounds on a model's shape: the presets are far inside them (7B: dim 4096, 32 layers); beyond them a
# model file describes no model that trains here, and would fail only after the work before training.
MAX_SEQ_LEN = 1 << 20
SHAPE_LIMITS = {"dim": 1 << 16, "n_layers": 1 << 10, "n_heads": 1 << 10, "n_kv_heads": 1 << 10,
                "ffn_dim": 1 << 18, "vocab_size": 1 << 32, "max_seq_len": MAX_SEQ_LEN}  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-style decoder; `vocab_size` comes from the tokenizer at run time."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int = 0
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    qk_norm: bool = False
    tie_embeddings: bool = True
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def __post_init__(self) -> None:
        for name, high in SHAPE_LIMITS.items():  # a model file's values, checked before any tensor exists
            value = getattr(self, name)
            low = 0 if name == "vocab_size" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for name in ("rope_theta", "norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for RoPE")

    def with_vocab(self, vocab_size: int, multiple_of: int = 64) -> ModelConfig:
        """Vocab padded up to `multiple_of`: matmuls on GPU are faster on aligned sizes."""
        padded = -(-vocab_size // multiple_of) * multiple_of
        return replace(self, vocab_size=padded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def num_params(self, include_embedding: bool = True) -> int:
        """Exact parameter count (matches `sum(p.numel())` of `trainer.model.Transformer`)."""
        d, hd = self.dim, self.head_dim
        attn = d * self.n_heads * hd * 2 + d * self.n_kv_heads * hd * 2
        norms = 2 * d + (2 * hd if self.qk_norm else 0)
        block = attn + 3 * d * self.ffn_dim + norms
        emb = self.vocab_size * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        total = self.n_layers * block + d + head + (emb if include_embedding else 0)
        return total


# Shapes follow published models of the same size: GPT-3 small/medium (125M, 350M), OLMo-1B /
# Llama-3.2-1B (1B, GQA 16:8), Llama-2-7B (untied). ffn_dim is a SwiGLU hidden size (~8/3 d).
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=176, max_seq_len=512),
    "125M": ModelConfig(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, ffn_dim=2048),
    "350M": ModelConfig(dim=1024, n_layers=24, n_heads=16, n_kv_heads=16, ffn_dim=2816),
    "1B": ModelConfig(dim=2048, n_layers=16, n_heads=16, n_kv_heads=8, ffn_dim=8192),
    "7B": ModelConfig(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=32,
        ffn_dim=11008,
        tie_embeddings=False,
        max_seq_len=4096,
    ),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """A preset by name with field overrides (e.g. qk_norm=True)."""
    if name not in PRESETS:
        raise KeyError(f"unknown model {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})
