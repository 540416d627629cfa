"""Model shapes by name, so a run, the planner and the exporter all agree on what "1B" means."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from common.cli import Bounded, integer, real

GateKind = Literal["softmax", "sigmoid"]
BalanceKind = Literal["aux", "bias", "none"]

# Bounds on a model's shape: the presets are far inside them (7B: dim 4096, 32 layers); beyond them a
# model file describes no model that trains here, and would fail only after the work before training.
MAX_SEQ_LEN = 1 << 20
MAX_RANKS = 1 << 20  # ranks of one run: ten times the largest clusters built
SHAPE_LIMITS = {"dim": 1 << 16, "n_layers": 1 << 10, "n_heads": 1 << 10, "n_kv_heads": 1 << 10,
                "ffn_dim": 1 << 18, "vocab_size": 1 << 32, "max_seq_len": MAX_SEQ_LEN}  # fmt: skip
# Every numeric field's range (a model file's values and the trainer's flags alike): `moe_experts: 1e9` sized a
# router for a billion experts, `init_std: 1e30` trained NaNs and exited 0.
MODEL_RANGES: dict[str, Bounded] = {
    **{name: integer(0 if name == "vocab_size" else 1, high) for name, high in SHAPE_LIMITS.items()},
    "rope_theta": real(0, 1e12, open_low=True), "norm_eps": real(0, 1, open_low=True),
    "init_std": real(0, 1, open_low=True), "moe_experts": integer(0, 1 << 16), "moe_top_k": integer(1, 1 << 16),
    "moe_every": integer(1, SHAPE_LIMITS["n_layers"]), "moe_capacity": real(0, 1 << 16),
    "moe_ffn_dim": integer(0, SHAPE_LIMITS["ffn_dim"]), "moe_aux_coef": real(0, 1e3), "moe_bias_rate": real(0, 1),
    "mup_base_dim": integer(0, SHAPE_LIMITS["dim"]),
}  # fmt: skip


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
    # Mixture of experts (trainer/moe.py); moe_experts 0 = dense. Layer i is MoE when (i + 1) % moe_every == 0.
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_every: int = 1
    moe_capacity: float = 0.0  # capacity factor; 0: dropless
    moe_ffn_dim: int = 0  # hidden size of each expert; 0: ffn_dim
    moe_gate: GateKind = "softmax"
    moe_balance: BalanceKind = "aux"
    moe_aux_coef: float = 0.01
    moe_bias_rate: float = 1e-3
    moe_shared_expert: bool = False
    # muP (trainer/mup.py): the width whose tuned learning rate transfers; 0 = standard parametrisation.
    mup_base_dim: int = 0

    @property
    def mup_width_mult(self) -> float:
        """m = dim / mup_base_dim: the factor muP's initialisation, learning rates and output scale use (1 when off)."""
        return self.dim / self.mup_base_dim if self.mup_base_dim else 1.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def __post_init__(self) -> None:
        for name, bounded in MODEL_RANGES.items():  # a model file's values, checked before any tensor exists
            bounded.check(getattr(self, name), name)
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for RoPE")
        if self.moe_experts:
            self._check_moe()
        base = self.mup_base_dim  # μP's base width: the width multiplier dim / base is then a whole number >= 1
        if isinstance(base, bool) or not isinstance(base, int) or base < 0 or (base and self.dim % base):
            raise ValueError(f"mup_base_dim must be 0 (off) or a divisor of dim {self.dim}, got {base!r}")

    def _check_moe(self) -> None:
        if not 1 <= self.moe_top_k <= self.moe_experts:
            raise ValueError(f"moe_top_k must be in [1, moe_experts={self.moe_experts}], got {self.moe_top_k}")
        if self.moe_every < 1 or self.moe_capacity < 0 or self.moe_ffn_dim < 0 or self.moe_aux_coef < 0:
            raise ValueError("moe_every must be >= 1, moe_capacity, moe_ffn_dim and moe_aux_coef >= 0")
        if self.moe_gate not in ("softmax", "sigmoid") or self.moe_balance not in ("aux", "bias", "none"):
            raise ValueError(f"moe_gate softmax|sigmoid and moe_balance aux|bias|none, got "
                             f"{self.moe_gate!r}, {self.moe_balance!r}")  # fmt: skip

    def is_moe_layer(self, index: int) -> bool:
        return self.moe_experts > 0 and (index + 1) % self.moe_every == 0

    @property
    def expert_ffn_dim(self) -> int:
        return self.moe_ffn_dim or self.ffn_dim

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

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
        dense_block = attn + 3 * d * self.ffn_dim + norms
        emb = self.vocab_size * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        moe = self.n_moe_layers
        total = (self.n_layers - moe) * dense_block + moe * (attn + norms + self._moe_ffn_params(self.moe_experts))
        return total + d + head + (emb if include_embedding else 0)

    def _moe_ffn_params(self, experts: int) -> int:
        """Router (all E rows) + `experts` SwiGLU experts + the shared expert."""
        per_expert = 3 * self.dim * self.expert_ffn_dim
        return self.moe_experts * self.dim + (experts + int(self.moe_shared_expert)) * per_expert

    def active_params(self, include_embedding: bool = True) -> int:
        """Parameters one token uses: the MoE layers count top_k experts (+ the shared one), not all E."""
        unused = self._moe_ffn_params(self.moe_experts) - self._moe_ffn_params(self.moe_top_k)
        return self.num_params(include_embedding) - self.n_moe_layers * unused


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
