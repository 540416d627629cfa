"""LoRA for SFT: low-rank adapters on chosen linear layers, the base frozen, trained under FSDP2.

`y = W x + (alpha / r) B A x` with A (r, in) Kaiming-uniform and B (out, r) zero, so training starts at
the base model. The adapted `nn.Linear` keeps its identity (its class becomes `LoRALinear`, the
adapters are two more parameters on it), so every parameter name of the base stays as it was:
the meta-device init plan, DCP checkpoints and the base's weights load unchanged, and the adapters
appear as `layers.N.attention.wq.lora_A` / `lora_B`. This happens on the meta model before
`fully_shard` (`TrainEngine(adapt=...)`), so FSDP2 shards the adapters beside the frozen weights.

Two exports: the merged model (`W + alpha / r B A`, a plain HF folder) and the adapter alone in PEFT's
format (`adapter_config.json`, `adapter_model.safetensors`) for `peft.PeftModel.from_pretrained` on
the base's HF export.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from trainer.checkpoint import TRAINER_STATE
from trainer.config import ModelConfig
from trainer.export_hf import hf_name, load_checkpoint_model
from trainer.materialize import _copy_local_shard

# our linear layers' names -> HF Llama's (PEFT's target_modules speak HF)
HF_MODULES = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj", "w1": "gate_proj", "w3": "up_proj",
              "w2": "down_proj"}  # fmt: skip
LORA_PARAMS = ("lora_A", "lora_B")


class LoRALinear(nn.Linear):
    """An nn.Linear with adapters; made by `LoRASpec.apply` from an existing layer (never constructed)."""

    lora_A: nn.Parameter
    lora_B: nn.Parameter
    scaling: float

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling


@dataclass(frozen=True)
class LoRASpec:
    """Rank, alpha and the targeted linear layers (ours: wq wk wv wo w1 w2 w3, or HF's q_proj ... names)."""

    rank: int
    alpha: float
    targets: tuple[str, ...]

    @classmethod
    def parse(cls, rank: int, alpha: float, targets: str) -> LoRASpec:
        hf_to_ours = {v: k for k, v in HF_MODULES.items()}
        names = tuple(dict.fromkeys(hf_to_ours.get(t.strip(), t.strip()) for t in targets.split(",") if t.strip()))
        unknown = [n for n in names if n not in HF_MODULES]
        if rank < 1 or not 0 < alpha < math.inf or not names or unknown:  # alpha inf: a NaN model, exit 0
            raise ValueError(
                f"LoRA needs --lora-rank >= 1, --lora-alpha > 0 (finite) and --lora-targets among "
                f"{','.join(HF_MODULES)} (or {','.join(HF_MODULES.values())}); got {rank}, {alpha}, {targets!r}"
            )
        return cls(rank, alpha, names)

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def apply(self, model: nn.Module) -> None:
        """Freeze every parameter, then give each targeted linear layer its (trainable) adapters, in place."""
        for p in model.parameters():
            p.requires_grad_(False)
        for name, module in model.named_modules():
            if type(module) is nn.Linear and name.rsplit(".", 1)[-1] in self.targets:
                device = module.weight.device
                module.__class__ = LoRALinear
                module.register_parameter(
                    "lora_A", nn.Parameter(torch.empty(self.rank, module.in_features, device=device))
                )
                module.register_parameter(
                    "lora_B", nn.Parameter(torch.empty(module.out_features, self.rank, device=device))
                )
                module.scaling = self.scaling  # type: ignore[assignment]

    @torch.no_grad()
    def init_adapters(self, model: nn.Module, seed: int) -> None:
        """A: Kaiming-uniform (PEFT's), B: 0; every rank draws the full tensors from `seed` and keeps its shard."""
        torch.manual_seed(seed)
        for module in model.modules():
            if isinstance(module, LoRALinear):
                a = torch.empty(module.lora_A.shape, device=module.weight.device)
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
                _copy_local_shard(module.lora_A, a)
                _copy_local_shard(module.lora_B, torch.zeros(module.lora_B.shape, device=a.device))

    def start(self, source: Path, model: nn.Module, model_cfg: ModelConfig, seed: int) -> dict[str, Any]:
        """Load the base's weights (an HF folder or a checkpoint) around the adapters, then initialise them."""
        from trainer.init_from import _hf_weights, _same_shape

        names = [n.replace("_orig_mod.", "") for n, _ in model.named_parameters(remove_duplicate=False)]
        base_names = [n for n in names if n.rsplit(".", 1)[-1] not in LORA_PARAMS]
        if (source / TRAINER_STATE).is_file():
            _same_shape(model_cfg, json.loads((source / TRAINER_STATE).read_text()).get("model_config", {}), source)
            weights, _ = load_checkpoint_model(source)
        else:
            weights = _hf_weights(source, model_cfg, base_names)
        result = set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
        missing = [k for k in result.missing_keys if k.rsplit(".", 1)[-1] not in LORA_PARAMS]
        if missing or result.unexpected_keys:
            raise ValueError(
                f"--base {source}: weights do not fit the model ({(missing + result.unexpected_keys)[:3]})"
            )
        self.init_adapters(model, seed)
        return {"path": str(source.resolve()), "kind": "lora", **self.record()}

    def record(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}

    def merge(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A full state dict with each adapter folded into its weight (W + alpha / r B A) and dropped."""
        merged = {k: v for k, v in weights.items() if k.rsplit(".", 1)[-1] not in LORA_PARAMS}
        for key in weights:
            if key.endswith(".lora_A"):
                prefix = key[: -len(".lora_A")]
                delta = weights[f"{prefix}.lora_B"].double() @ weights[key].double() * self.scaling
                merged[f"{prefix}.weight"] = (weights[f"{prefix}.weight"].double() + delta).to(weights[key].dtype)
        return merged

    def export_peft(self, weights: dict[str, torch.Tensor], out_dir: Path, base: Path | None) -> Path:
        """The adapters alone as PEFT writes them: `peft.PeftModel.from_pretrained(base_hf_model, out_dir)`."""
        from safetensors.torch import save_file

        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for key, value in weights.items():
            kind = key.rsplit(".", 1)[-1]
            if kind in LORA_PARAMS:
                module = hf_name(key[: -len(kind)] + "weight").removesuffix(".weight")
                tensors[f"base_model.model.{module}.{kind}.weight"] = (
                    value.detach().to("cpu", torch.float32).contiguous()
                )
        save_file(tensors, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": self.rank,
            "lora_alpha": self.alpha,
            "lora_dropout": 0.0,
            "target_modules": sorted(HF_MODULES[t] for t in self.targets),
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "use_rslora": False,
            "init_lora_weights": True,
            "base_model_name_or_path": str(base) if base is not None else None,
        }
        (out_dir / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        return out_dir
