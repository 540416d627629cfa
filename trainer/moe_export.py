"""The Hugging Face formats of a mixture-of-experts model: Mixtral, or Qwen3-MoE with QK-norm.

Both route as `trainer.moe` does with softmax gates (softmax over all experts, top-k, renormalised
over the k; Qwen3-MoE with `norm_topk_prob`), so the export is a rename plus one tensor per expert
(the Hub's layout; `transformers` >= 5 fuses them on load). Mixtral has MoE in every layer and no
QK-norm; Qwen3-MoE has QK-norm and takes dense layers between MoE ones (`decoder_sparse_step`).
What neither routes like (sigmoid gates, the DeepSeek-V3 selection bias, a shared expert) is
refused before training starts, so a run does not end on an export it cannot write.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.config import ModelConfig

_EXPERT_NAMES = {
    "mixtral": ("block_sparse_moe", {"w1": "w1", "w3": "w3", "w2": "w2"}),
    "qwen3_moe": ("mlp", {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}),
}


def moe_format(cfg: ModelConfig) -> str:
    """`mixtral` or `qwen3_moe`; a ValueError (one line) naming what no format routes like."""
    unsupported = []
    if cfg.moe_gate != "softmax":
        unsupported.append(f"--moe-gate {cfg.moe_gate}")
    if cfg.moe_balance == "bias":
        unsupported.append("--moe-balance bias (a selection bias)")
    if cfg.moe_shared_expert:
        unsupported.append("--moe-shared-expert")
    if not cfg.qk_norm and cfg.moe_every != 1:
        unsupported.append("dense layers between MoE layers without --qk-norm (Mixtral is MoE in every layer)")
    if unsupported:
        raise ValueError(
            f"no transformers MoE format (Mixtral, Qwen3-MoE) routes like {', '.join(unsupported)}: pass --no-export-hf"
        )
    return "qwen3_moe" if cfg.qk_norm else "mixtral"


def moe_config(cfg: ModelConfig) -> dict[str, Any]:
    """config.json fields of the MoE format (over the Llama/Qwen3 ones)."""
    if moe_format(cfg) == "mixtral":
        return {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "intermediate_size": cfg.expert_ffn_dim,
            "num_local_experts": cfg.moe_experts,
            "num_experts_per_tok": cfg.moe_top_k,
            "router_aux_loss_coef": cfg.moe_aux_coef,
            "router_jitter_noise": 0.0,
            "sliding_window": None,
        }
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": cfg.expert_ffn_dim,
        "num_experts": cfg.moe_experts,
        "num_experts_per_tok": cfg.moe_top_k,
        "decoder_sparse_step": cfg.moe_every,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "router_aux_loss_coef": cfg.moe_aux_coef,
    }


def moe_tensors(name: str, tensor: torch.Tensor, cfg: ModelConfig) -> dict[str, torch.Tensor] | None:
    """HF tensors for one of our MoE parameters ({} for the selection bias), None for any other name."""
    if ".feed_forward." not in name:
        return None
    prefix, rest = name.split(".feed_forward.", 1)
    block, names = _EXPERT_NAMES[moe_format(cfg)]
    base = f"model.{prefix}.{block}"
    if rest == "router.weight":
        return {f"{base}.gate.weight": tensor}
    if rest == "expert_bias":
        return {}  # all zero unless --moe-balance bias, which moe_format refuses
    if rest.startswith("experts."):
        ours = rest.removeprefix("experts.")
        return {f"{base}.experts.{e}.{names[ours]}.weight": tensor[e] for e in range(tensor.shape[0])}
    return None
