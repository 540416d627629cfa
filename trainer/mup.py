"""μP (maximal update parametrisation, Yang et al., Tensor Programs V, 2022): a base width's tuned LR transfers.

Opt-in with `ModelConfig.mup_base_dim` (`--mup-base-dim D`); off (0) the model and optimizer are the
standard parametrisation (SP), bit for bit. With width multiplier m = dim / D (every hidden width,
`ffn_dim` and `n_heads * head_dim`, is taken to scale with `dim`), following the `mup` package's rules
for Adam (its `MuReadout`, `mup.init`, `MuAdamW`):

- hidden matrices (every >= 2-D weight inside the blocks: attention, MLP, router, experts) are drawn with
  std / sqrt(m) (variance 1/fan_in relative to the base); the embedding, the head and the norms as in SP;
  the query projection starts at zero (TP V's advice, D.2: attention is uniform at init at every width, as
  1/head_dim scores of random q, k vanish only in the limit), except with QK-norm (a zero q would be
  normalised by sqrt(eps): its gradient x 300); an untied head keeps SP's init (its logits are x 1/m);
- AdamW: the hidden matrices' LR is lr / m, with weight decay x m so the decay per step (lr * wd) is
  the base width's (`mup`'s default, decoupled_wd=False); embedding, head and norm gains keep lr;
- the logits are multiplied by 1/m (`Readout`; the head is "vector-like": its LR is not scaled), so the
  head may stay tied to the embedding;
- attention scores use 1/head_dim instead of 1/sqrt(head_dim) (μP's choice: q and k become correlated
  during training, so their dot product grows like head_dim). Applied as q * 1/sqrt(head_dim) inside
  `Attention.project`, before SDPA's own 1/sqrt(head_dim), so every caller of `project` (training,
  cached scoring, generation, context parallel) sees the same scores.

With Muon (`--optimizer muon`): the initialisation, output and attention rules are the same, AdamW's
groups are as above, and the Muon group's LR is lr / sqrt(m) (its decay x sqrt(m)). Muon's update is
orthogonal (spectral norm 1) times Moonshot's 0.2 sqrt(max(rows, cols)) (`trainer.muon`), which grows
like sqrt(m) for the square-ish hidden matrices; dividing by sqrt(m) keeps the update's spectral norm
at the base width's, which is μP's spectral condition (Yang, Simon & Bernstein 2023). Measured with
`bench/mup_sweep.py --optimizer muon`: the best LR moves one sweep step from width 32 to 128 (trainer/README.md).

At m = 1 (dim == D) the only difference from SP is the attention scale.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from trainer.config import ModelConfig
from trainer.muon import is_muon_param


class Readout(nn.Linear):
    """μP's output projection: logits times `multiplier` (1/m). Same weight and state-dict name as the
    plain `nn.Linear` head of SP, so checkpoints, FSDP2 and TP treat it as that head."""

    def __init__(self, in_features: int, out_features: int, multiplier: float) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.multiplier = multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.multiplier


def query_scale(head_dim: int, mup: bool) -> float:
    """Extra factor on q so that SDPA's 1/sqrt(head_dim) becomes μP's 1/head_dim (1.0 in SP)."""
    return 1.0 / math.sqrt(head_dim) if mup else 1.0


def hidden_param(name: str, param: torch.Tensor) -> bool:
    """A μP "matrix-like" weight: both dims grow with width (the same set Muon takes)."""
    return is_muon_param(name, param)


def mup_groups(
    groups: list[dict[str, Any]], model: nn.Module, lr: float, width_mult: float, root: float = 1.0
) -> list[dict[str, Any]]:
    """`groups` with the hidden matrices split out into groups of their own at lr x (1/m)^(1/root) and weight
    decay x m^(1/root) (root 1: AdamW; 2: Muon). The other groups keep their settings and come first, so
    group 0's LR, the one the loop logs, is still --lr."""
    hidden = {id(p) for name, p in model.named_parameters() if p.requires_grad and hidden_param(name, p)}
    factor = width_mult ** (1.0 / root)
    kept, scaled = [], []
    for group in groups:
        params = list(group["params"])
        rest = [p for p in params if id(p) not in hidden]
        mine = [p for p in params if id(p) in hidden]
        if rest:
            kept.append({**group, "params": rest})
        if mine:
            scaled.append({**group, "params": mine, "lr": lr / factor, "weight_decay": group["weight_decay"] * factor})
    return kept + scaled


def fold_for_export(
    state_dict: dict[str, torch.Tensor], cfg: ModelConfig
) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """The same function in SP form, for a Hugging Face Llama / Qwen3 (which know no μP): the query scale
    folded into the q projection (or, with QK-norm, into q_norm's gain, applied after the norm), and the
    logit multiplier 1/m into an untied head (a tied head becomes untied: the embedding keeps its scale).
    Returns (state dict, ModelConfig with mup off and tie_embeddings False); SP models pass unchanged."""
    if not cfg.mup_base_dim:
        return state_dict, cfg
    folded = dict(state_dict)
    q_key = "attention.q_norm.weight" if cfg.qk_norm else "attention.wq.weight"
    scale = query_scale(cfg.head_dim, True)
    for name, tensor in state_dict.items():
        if name.endswith(q_key):
            folded[name] = tensor * scale
    head = state_dict["tok_embeddings.weight"] if cfg.tie_embeddings else state_dict["output.weight"]
    folded["output.weight"] = head / cfg.mup_width_mult
    return folded, replace(cfg, mup_base_dim=0, tie_embeddings=False)
