"""Export to a Hugging Face checkpoint (model.safetensors + config.json) that `transformers` loads as is.

Our model uses HF's conventions, so export is a rename: Llama for the plain model, Qwen3 (Llama
plus per-head q/k RMSNorm) when the model was trained with QK-norm. Two ways in: `export_live`
from the sharded model at the end of a run, and the CLI from a DCP checkpoint directory:

    python -m trainer.export_hf --checkpoint out/checkpoints/step_000000100 --out out/hf
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from common.atomic import FILE_MODE
from common.bounded_input import MAX_DATA_BYTES, read_json_bounded
from common.cli import ArgumentParser, fail
from common.lock import (
    FolderLock,
    FolderUnavailable,
    check_apart,
    check_local_output,
    check_writable,
    refuse_inside_live_folder,
)
from tokenizer.artifacts import load_tokenizer
from trainer.checkpoint_trust import UntrustedCheckpoint
from trainer.config import ModelConfig
from trainer.moe_export import moe_config, moe_tensors
from trainer.mup import fold_for_export

log = logging.getLogger(__name__)

_LAYER_NAMES = {
    "attention_norm.weight": "input_layernorm.weight",
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "attention.q_norm.weight": "self_attn.q_norm.weight",
    "attention.k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
}
_TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json")
_TOP_NAMES = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}


def hf_name(name: str) -> str:
    """Our parameter name -> the HF Llama/Qwen3 name."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    if name == "output.weight":
        return "lm_head.weight"
    prefix, index, rest = name.split(".", 2)
    if prefix != "layers" or rest not in _LAYER_NAMES:
        raise KeyError(f"no HF name for parameter {name!r}")
    return f"model.layers.{index}.{_LAYER_NAMES[rest]}"


def hf_config(cfg: ModelConfig, dtype: torch.dtype, eos_id: int | None, bos_id: int | None) -> dict[str, Any]:
    """config.json for LlamaForCausalLM, or Qwen3ForCausalLM when QK-norm is on (their MoE forms:
    `trainer.moe_export`)."""
    arch, model_type = ("Qwen3ForCausalLM", "qwen3") if cfg.qk_norm else ("LlamaForCausalLM", "llama")
    config: dict[str, Any] = {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,  # transformers < 5
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},  # transformers >= 5
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "use_cache": True,
    }
    if cfg.qk_norm:
        config.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.n_layers})
    if cfg.moe_experts:
        config.update(moe_config(cfg))
    return config


def model_config_from_hf(config: dict[str, Any]) -> ModelConfig | None:
    """Our ModelConfig for an HF Llama/Qwen3 config, or None when our model cannot represent it."""
    if config.get("model_type") not in ("llama", "qwen3"):
        return None
    dim, heads = config["hidden_size"], config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}
    if config.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        return None
    if config.get("head_dim", dim // heads) != dim // heads or config.get("attention_bias") or config.get("mlp_bias"):
        return None
    if config.get("hidden_act", "silu") != "silu":
        return None
    return ModelConfig(
        dim=dim,
        n_layers=config["num_hidden_layers"],
        n_heads=heads,
        n_kv_heads=config.get("num_key_value_heads", heads),
        ffn_dim=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        max_seq_len=config["max_position_embeddings"],
        rope_theta=float(config.get("rope_theta") or rope.get("rope_theta", 10000.0)),
        norm_eps=config["rms_norm_eps"],
        qk_norm=config["model_type"] == "qwen3",
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def export_hf(
    state_dict: dict[str, torch.Tensor],
    cfg: ModelConfig,
    out_dir: Path,
    *,
    dtype: torch.dtype = torch.float32,
    tokenizer: Path | None = None,
    eos_id: int | None = None,
    bos_id: int | None = None,
) -> Path:
    """Write model.safetensors + config.json (+ tokenizer.json) into `out_dir` from a full state dict."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state_dict, cfg = fold_for_export(state_dict, cfg)  # μP's scales into the weights (trainer/mup.py)
    tensors = {}
    for name, tensor in state_dict.items():
        if name == "output.weight" and cfg.tie_embeddings:
            continue  # shared with the embedding; HF re-ties it from tie_word_embeddings
        moe = moe_tensors(name, tensor, cfg) if cfg.moe_experts else None
        for key, value in (moe if moe is not None else {hf_name(name): tensor}).items():
            tensors[key] = value.detach().to("cpu", dtype).contiguous()
    weights = out_dir / "model.safetensors"
    partial = weights.with_name(f".{weights.name}.tmp")  # a killed export leaves no half-written weights
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.chmod(partial, FILE_MODE)  # safetensors writes 0600: the export is read by others as its config is
    os.replace(partial, weights)
    (out_dir / "config.json").write_text(json.dumps(hf_config(cfg, dtype, eos_id, bos_id), indent=2) + "\n")
    if tokenizer is not None:
        _copy_into(Path(tokenizer), out_dir / "tokenizer.json")
        for extra in _TOKENIZER_SIDE_FILES:  # what AutoTokenizer reads, when the tokenizer room wrote it
            if (Path(tokenizer).parent / extra).is_file():
                _copy_into(Path(tokenizer).parent / extra, out_dir / extra)
    return out_dir


def _copy_into(source: Path, target: Path) -> None:
    """Copy `source` to `target`, unless it is that file already (a --tokenizer inside --out: shutil's
    SameFileError was a traceback after the weights and config had been written)."""
    if not (target.exists() and os.path.samefile(source, target)):
        shutil.copyfile(source, target)


def export_live(
    model: nn.Module,
    cfg: ModelConfig,
    out_dir: Path,
    *,
    tokenizer: Path | None = None,
    eos_id: int | None = None,
    bos_id: int | None = None,
) -> Path:
    """Gather the sharded model's full weights to rank 0 (collective: every rank calls it) and export there."""
    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        export_hf(weights, cfg, out_dir, tokenizer=tokenizer, eos_id=eos_id, bos_id=bos_id)
        log.info("exported Hugging Face checkpoint to %s", out_dir)
    dist.barrier()
    return out_dir


def load_checkpoint_model(checkpoint: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Full model weights and trainer state from a DCP checkpoint directory, in this one process."""
    import torch.distributed.checkpoint as dcp

    from trainer.checkpoint import TRAINER_STATE
    from trainer.checkpoint_trust import trusted_reader
    from trainer.model import Transformer

    reader = trusted_reader(checkpoint)  # before reading anything of it: checkpoint_trust.py
    state = read_json_bounded(checkpoint / TRAINER_STATE, MAX_DATA_BYTES)
    cfg = ModelConfig(**state["model_config"])
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device="cpu")
    weights = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load(weights, storage_reader=reader, no_dist=True)
    return weights["model"], state


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a step_* directory written by the trainer")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json to copy next to the weights")
    args = parser.parse_args(argv)
    try:  # the export must not land in the checkpoint (it could never be verified and loaded again)
        check_local_output(args.out, "trainer.export_hf")
        check_apart(args.out, {"checkpoint": args.checkpoint})
        refuse_inside_live_folder(args.out, "export_hf")  # a subfolder of a training run's --out while it trains
        check_writable(args.out)
    except FolderUnavailable as err:
        fail(err)
    try:  # copied after the weights: a FIFO, a folder or a file that is no tokenizer is refused first
        if args.tokenizer is not None:
            load_tokenizer(args.tokenizer)
    except (OSError, ValueError) as err:
        fail(f"--tokenizer {args.tokenizer}: {err}")
    try:
        weights, state = load_checkpoint_model(args.checkpoint)
    except UntrustedCheckpoint as err:  # before anything is written
        fail(err)
    except (OSError, ValueError, KeyError, TypeError) as err:  # trainer_state.json missing or malformed
        fail(f"{args.checkpoint}: not a checkpoint written by this trainer ({type(err).__name__}: {err})")
    cfg = ModelConfig(**state["model_config"])
    tok = state.get("tokenizer", {})
    try:  # one export per --out: two into one folder would mix one's weights with the other's config
        FolderLock(args.out, "export_hf").acquire()  # held until this process exits
    except FolderUnavailable as err:
        fail(err)
    export_hf(
        weights,
        cfg,
        args.out,
        dtype=getattr(torch, args.dtype),
        tokenizer=args.tokenizer or (Path(tok["path"]) if tok.get("path") else None),
        eos_id=tok.get("eos_id"),
        bos_id=tok.get("bos_id"),
    )
    print(f"exported {args.checkpoint} -> {args.out}")


if __name__ == "__main__":
    main()
