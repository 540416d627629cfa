"""Load a model to evaluate: an exported Hugging Face folder, a trainer output folder or a DCP checkpoint.

The fast path runs our own plain-PyTorch `trainer.model.Transformer` (the export is a rename, so
the HF weights map back one to one); `backend="hf"` runs `transformers`' model instead (the
oracle, and the way to evaluate a Llama-family folder our model cannot represent).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from common.bounded_input import read_json_bounded
from evals.scoring import Forward, PrefixForward, make_scorer
from evals.tasks.base import Encoder, ScoreFn, prefix_token
from trainer.config import ModelConfig
from trainer.export_hf import model_config_from_hf


def cpu_threads() -> tuple[int, str]:
    """Threads for evaluating on the CPU, and why: torch's default (every core) oversubscribes a busy machine
    and the ranks of a job (issue 31: `--limit 10` bpb 142.7 s with it, 17.9 s with one thread). The CPUs this
    process may use, less the ones the load average says are busy, shared among the local ranks; an explicit
    OMP_NUM_THREADS wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    cpus = len(os.sched_getaffinity(0))
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    load = os.getloadavg()[0]
    free = max(1, min(cpus, round(cpus - load)))
    return max(1, free // ranks), f"{cpus} CPUs, load {load:.1f}, {ranks} local rank(s)"


class ModelLoadError(ValueError):
    """The model folder is missing or not something we can load: a one-line error."""


@dataclass
class LoadedModel:
    """A model split into `body` (tokens -> final hidden states) and `head` (hidden -> logits), so the
    scorer runs the vocabulary projection only where a token is scored."""

    path: Path
    backend: str
    body: Forward
    head: Forward
    encoder: Encoder
    device: torch.device
    prefix_body: PrefixForward | None = None  # our model only: shared prefixes encoded once

    def scorer(
        self, batch_size: int = 32, progress: Callable[[int], None] | None = None, share_prefix: bool = True
    ) -> ScoreFn:
        """With `share_prefix` (and our model), requests that share a context encode it once."""
        return make_scorer(
            self.body,
            self.device,
            batch_size=batch_size,
            progress=progress,
            head=self.head,
            prefix_body=self.prefix_body if share_prefix else None,
        )


KV = tuple[torch.Tensor, torch.Tensor]


def block_step(
    layer: torch.nn.Module,
    h: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    past: KV | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, KV]:
    """One block of our Transformer (`trainer.model.Block`'s maths) whose attention also sees `past` keys and
    values (B, kv_heads, t0, head_dim) before the new ones; causal when neither `past` nor `mask` is given.
    Returns the block's output and this step's own keys and values (to cache)."""
    attn, x = layer.attention, layer.attention_norm(h)
    b, t, _ = x.shape
    q, k, v = attn.project(x, cos, sin)
    keys, values = (k, v) if past is None else (torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2))
    causal = past is None and mask is None and t > 1
    y = torch.nn.functional.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, is_causal=causal, enable_gqa=attn.n_kv_heads != attn.n_heads
    )
    h = h + attn.wo(y.transpose(1, 2).reshape(b, t, -1))
    return h + layer.feed_forward(layer.ffn_norm(h)), (k, v)


def prefix_forward(model: torch.nn.Module) -> PrefixForward:
    """`evals.scoring.PrefixForward` over our Transformer (its head split off): the prefixes run once,
    causally; each suffix row attends to its group's cached keys and values up to the prefix's length
    and causally to itself, with rotary positions that continue the prefix."""

    def forward(
        prefixes: torch.Tensor, lens: torch.Tensor, suffixes: torch.Tensor, group: torch.Tensor
    ) -> torch.Tensor:
        p, s = prefixes.shape[1], suffixes.shape[1]
        h = model.tok_embeddings(prefixes)
        cos, sin = model.rope_cos[:p].to(h.dtype), model.rope_sin[:p].to(h.dtype)
        cache = []
        for layer in model.layers:  # right padding sits after every real prefix token: causal is enough
            h, kv = block_step(layer, h, cos, sin)
            cache.append(kv)
        start = lens[group]  # (N,) where each suffix row begins
        steps = torch.arange(s, device=suffixes.device)
        positions = (start[:, None] + steps).clamp(max=model.cfg.max_seq_len - 1)  # padding may run past
        h = model.tok_embeddings(suffixes)
        cos, sin = model.rope_cos[positions][:, None].to(h.dtype), model.rope_sin[positions][:, None].to(h.dtype)
        seen = torch.arange(p, device=suffixes.device)[None, None, :] < start[:, None, None]  # (N, 1, P)
        causal = torch.ones(s, s, dtype=torch.bool, device=h.device).tril()[None].expand(len(group), -1, -1)
        mask = torch.cat([seen.expand(-1, s, -1), causal], dim=2)  # (N, S, P + S)
        for layer, (k, v) in zip(model.layers, cache, strict=True):
            h, _ = block_step(layer, h, cos, sin, past=(k[group], v[group]), mask=mask[:, None])
        return model.norm(h)

    return forward


def split_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Our Transformer as (body, head): the output projection is taken out (tied weights stay shared)."""
    head = model.output
    model.output = torch.nn.Identity()
    return model, head


def resolve_model_dir(path: Path) -> tuple[str, Path]:
    """('hf', folder) or ('dcp', step folder) for a HF folder, a trainer --out folder or a checkpoint."""
    if not path.exists():
        raise ModelLoadError(f"model {path} does not exist")
    if (path / "config.json").is_file():
        return "hf", path
    if (path / "trainer_state.json").is_file() and (path / ".metadata").is_file():
        return "dcp", path
    if (path / "hf" / "config.json").is_file():
        return "hf", path / "hf"
    steps = sorted(p for p in (path / "checkpoints").glob("step_*") if (p / ".metadata").is_file())
    if steps:
        return "dcp", steps[-1]
    raise ModelLoadError(f"{path}: neither a Hugging Face folder (config.json), a checkpoint nor a trainer output")


def our_model(cfg: ModelConfig, hf_weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """`trainer.model.Transformer` with weights named as `trainer.export_hf` names them."""
    from trainer.export_hf import hf_name
    from trainer.model import Transformer

    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device="cpu")
    ours = {}
    for name in model.state_dict():
        if name == "output.weight" and cfg.tie_embeddings:
            continue
        if hf_name(name) not in hf_weights:
            raise ModelLoadError(f"weights lack {hf_name(name)}")
        ours[name] = hf_weights[hf_name(name)]
    model.load_state_dict(ours, strict=not cfg.tie_embeddings)
    if cfg.tie_embeddings:  # to_empty() gives the tied head its own (uninitialised) storage: tie it again
        model.output.weight = model.tok_embeddings.weight
    model.rope_cos, model.rope_sin = _rope(cfg)
    return model.eval()


def _rope(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    from trainer.model import rope_cos_sin

    return rope_cos_sin(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)


def pick_device(device: str) -> torch.device:
    """`auto` (cuda when present), or a device torch knows; a bogus name (a RuntimeError traceback) or a
    CUDA device this machine lacks (an error deep in the first forward) is a ModelLoadError, one line."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except RuntimeError as err:
        raise ModelLoadError(f"--device {device!r}: {err}") from None
    if chosen.type == "cuda" and (chosen.index or 0) >= torch.cuda.device_count():
        raise ModelLoadError(f"--device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return chosen


def load_model(path: str | Path, backend: str = "auto", device: str = "auto") -> LoadedModel:
    """The model at `path` with its tokenizer, in fp32, ready to score."""
    kind, folder = resolve_model_dir(Path(path))
    dev = pick_device(device)
    if kind == "dcp":
        return _load_checkpoint(folder, backend, dev)
    try:  # bounded: a sparse 3 GiB config.json took 4.8 GiB of memory
        config = read_json_bounded(folder / "config.json")
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{folder}: config.json unreadable ({err})") from None
    if not (folder / "tokenizer.json").is_file():
        raise ModelLoadError(f"{folder}: no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cfg = model_config_from_hf(config)
    if backend == "ours" and cfg is None:
        raise ModelLoadError(f"{folder}: our model cannot represent this config; use --backend hf")
    prefix = prefix_token(tokenizer, folder, config.get("bos_token_id"), config.get("eos_token_id"))
    context = int(config.get("max_position_embeddings") or 2048)
    encoder = Encoder(tokenizer, prefix, context)
    if backend == "hf" or cfg is None:
        return LoadedModel(folder, "transformers", *_transformers_parts(folder, dev), encoder, dev)
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder}: no .safetensors weights")
    weights = {k: v.float() for f in files for k, v in load_file(str(f)).items()}
    model = our_model(cfg, weights).to(dev)
    return LoadedModel(folder, "ours", *split_head(model), encoder, dev, prefix_forward(model))


def _transformers_parts(folder: Path, device: torch.device) -> tuple[Forward, Forward]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()

    def body(tokens: torch.Tensor) -> torch.Tensor:
        return model.model(input_ids=tokens, use_cache=False).last_hidden_state

    return body, model.get_output_embeddings()


def _load_checkpoint(step: Path, backend: str, device: torch.device) -> LoadedModel:
    """A DCP checkpoint, gathered in this process; its tokenizer from trainer_state.json."""
    from trainer.export_hf import load_checkpoint_model
    from trainer.model import Transformer

    if backend == "hf":
        raise ModelLoadError(f"{step}: a checkpoint runs on our model; export it (trainer.export_hf) for --backend hf")
    weights, state = load_checkpoint_model(step)
    cfg = ModelConfig(**state["model_config"])
    tok = state.get("tokenizer") or {}
    tok_path = Path(tok.get("path") or "")
    if not tok_path.is_file():
        raise ModelLoadError(f"{step}: tokenizer {tok_path} named in trainer_state.json is missing")
    tokenizer = Tokenizer.from_file(str(tok_path))
    model = Transformer(cfg)
    model.load_state_dict(weights)
    prefix = prefix_token(tokenizer, tok_path.parent, tok.get("bos_id"), tok.get("eos_id"))
    body, head = split_head(model.eval().to(device))
    encoder = Encoder(tokenizer, prefix, cfg.max_seq_len)
    return LoadedModel(step, "ours", body, head, encoder, device, prefix_forward(body))
