"""Generate text from a model: a plain prompt or a chat turn, greedy or sampled, with a KV cache.

    python -m evals.generate out/sft/hf --chat --prompt "What is 3 + 4?" --max-new-tokens 64
    python -m evals.generate out/train/hf --prompt "The city of" --temperature 0.8 --top-k 50 --top-p 0.95
    python -m evals.generate out/sft/hf --chat --gsm8k held_out.jsonl --limit 200 --out gsm8k.json

MODEL: an exported HF folder, a trainer `--out` folder or a checkpoint `step_*` folder (as evals.run).
`--chat` wraps the prompt in the chat format (`tokenizer.chat`: what `apply_chat_template(...,
add_generation_prompt=True)` renders) and stops at `<|end|>`; every generation stops at `<|endoftext|>`.
Temperature 0 (the default) is greedy: the tokens `transformers`' `generate` gives on the export.
`--gsm8k FILE` generates greedily for each question and scores the number after `####` exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from common.atomic import atomic_write_bytes
from common.cli import SEED, TOKENS, ArgumentParser, integer, one_line, real
from common.lock import check_not_input
from evals.gsm8k import GSM8KDataError, Problem, read_problems, score
from evals.models import ModelLoadError, pick_device, resolve_model_dir
from tokenizer.chat import ASSISTANT, END, USER
from tokenizer.model import EOT
from trainer.model import Transformer


@dataclass(frozen=True)
class Sampling:
    """temperature 0: greedy; else softmax(logits / temperature) cut to the top-k, then to the top-p mass."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def check(self) -> None:
        if not 0 <= self.temperature < math.inf or self.top_k < 0 or not 0 < self.top_p <= 1:  # nan too
            raise ValueError("--temperature and --top-k must be >= 0 and --top-p in (0, 1]")


def load_transformer(path: str | Path, device: str = "auto") -> tuple[Transformer, Tokenizer]:
    """Our Transformer (fp32, eval) and its tokenizer, from an HF folder, a trainer output or a checkpoint."""
    from trainer.config import ModelConfig
    from trainer.export_hf import load_checkpoint_model, model_config_from_hf

    kind, folder = resolve_model_dir(Path(path))
    if kind == "dcp":
        weights, state = load_checkpoint_model(folder)
        model = Transformer(ModelConfig(**state["model_config"]))
        model.load_state_dict(weights)
        tok_path = Path((state.get("tokenizer") or {}).get("path") or "")
    else:
        from safetensors.torch import load_file

        from evals.models import our_model

        cfg = model_config_from_hf(json.loads((folder / "config.json").read_text()))
        if cfg is None:
            raise ModelLoadError(f"{folder}: our model cannot represent this config")
        model = our_model(cfg, {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()})
        tok_path = folder / "tokenizer.json"
    if not tok_path.is_file():
        raise ModelLoadError(f"{folder}: no tokenizer at {tok_path}")
    return model.eval().to(pick_device(device)), Tokenizer.from_file(str(tok_path))


class KVCache:
    """Each layer's keys and values so far, (1, kv_heads, t, head_dim): a new token attends to them all."""

    def __init__(self, layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.length = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = k if old_k is None else torch.cat([old_k, k], dim=2)
        self.values[layer] = v if old_v is None else torch.cat([old_v, v], dim=2)
        return self.keys[layer], self.values[layer]  # type: ignore[return-value]


@torch.no_grad()
def forward_cached(model: Transformer, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Logits (1, t, vocab) of `tokens` following the cached ones: `Transformer.forward`'s maths, one step at a time."""
    start, t = cache.length, tokens.shape[1]
    if start + t > model.cfg.max_seq_len:
        raise ValueError(f"{start + t} tokens exceed the model's context of {model.cfg.max_seq_len}")
    h = model.tok_embeddings(tokens)
    cos, sin = model.rope_cos[start : start + t].to(h.dtype), model.rope_sin[start : start + t].to(h.dtype)
    for i, layer in enumerate(model.layers):
        attn, x = layer.attention, layer.attention_norm(h)
        q, k, v = attn.project(x, cos, sin)
        k, v = cache.extend(i, k, v)
        gqa = attn.n_kv_heads != attn.n_heads
        y = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and t > 1, enable_gqa=gqa)
        h = h + attn.wo(y.transpose(1, 2).reshape(1, t, -1))
        h = h + layer.feed_forward(layer.ffn_norm(h))
    cache.length += t
    return model.output(model.norm(h))


def _pick(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    if sampling.temperature == 0:
        return int(logits.argmax())
    logits = logits.float() / sampling.temperature
    if sampling.top_k:
        kth = torch.topk(logits, min(sampling.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1:
        ordered, order = torch.sort(logits, descending=True)
        mass = ordered.softmax(-1).cumsum(-1)
        drop = mass - ordered.softmax(-1) >= sampling.top_p  # keep the smallest prefix reaching top_p
        logits[order[drop]] = float("-inf")
    return int(torch.multinomial(logits.softmax(-1).cpu(), 1, generator=generator))


def generate_ids(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    stop: set[int],
    sampling: Sampling = Sampling(),
) -> list[int]:
    """New ids after `prompt` (a stop id included when reached), at most `max_new_tokens` or the context."""
    device = model.tok_embeddings.weight.device
    generator = torch.Generator().manual_seed(sampling.seed)
    cache = KVCache(len(model.layers))
    room = min(max_new_tokens, model.cfg.max_seq_len - len(prompt))
    out: list[int] = []
    if room <= 0 or not prompt:
        return out
    logits = forward_cached(model, torch.tensor([prompt], device=device), cache)[0, -1]
    for _ in range(room):
        token = _pick(logits, sampling, generator)
        out.append(token)
        if token in stop or len(out) == room:
            break
        logits = forward_cached(model, torch.tensor([[token]], device=device), cache)[0, -1]
    return out


class Generator:
    """A model and its tokenizer: prompts in, text out (chat prompts in the chat format)."""

    def __init__(self, model: Transformer, tok: Tokenizer) -> None:
        self.model, self.tok = model, tok
        self.eot = tok.token_to_id(EOT)
        self.chat_ids = [tok.token_to_id(t) for t in (USER, ASSISTANT, END)]

    def prompt_ids(self, prompt: str, chat: bool) -> list[int]:
        if not chat:
            return self.tok.encode(prompt, add_special_tokens=False).ids
        if None in self.chat_ids:
            raise ModelLoadError("--chat needs a tokenizer with the chat tokens (tokenizer.chat)")
        user, assistant, end = self.chat_ids
        return [user, *self.tok.encode(prompt, add_special_tokens=False).ids, end, assistant]

    def __call__(self, prompt: str, chat: bool, max_new_tokens: int, sampling: Sampling = Sampling()) -> str:
        stop = {self.eot} | ({self.chat_ids[2]} if chat else set())
        ids = generate_ids(self.model, self.prompt_ids(prompt, chat), max_new_tokens, stop - {None}, sampling)
        if ids and ids[-1] in stop:
            ids = ids[:-1]
        return self.tok.decode(ids, skip_special_tokens=False)

    @property
    def has_chat_tokens(self) -> bool:
        return None not in self.chat_ids


def answer_gsm8k(
    gen: Generator, problems: Sequence[Problem], chat: bool, max_new_tokens: int, progress: bool = False
) -> tuple[list[str], dict[str, float | int]]:
    """Greedy answers to each question and their scores (exact answer, `#### n` format): GSM8K's protocol,
    shared by `evals.generate --gsm8k` and `evals.run --task gsm8k=FILE`."""
    texts = [gen(p.question, chat, max_new_tokens) for p in tqdm(problems, desc="gsm8k", disable=not progress)]
    return texts, score(texts, list(problems))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m evals.generate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", type=Path, help="HF folder, trainer output folder or checkpoint step_* folder")
    parser.add_argument("--prompt", action="append", default=[], help="repeatable")
    parser.add_argument("--chat", action="store_true", help="prompt as a user turn; the answer stops at <|end|>")
    parser.add_argument("--gsm8k", type=Path, help="JSONL with question/answer: greedy answers scored after ####")
    parser.add_argument("--limit", type=integer(1, 1 << 40), help="only the first N GSM8K problems")
    parser.add_argument("--max-new-tokens", type=TOKENS, default=256)
    parser.add_argument("--temperature", type=real(0, 100), default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=integer(0, 1 << 32), default=0, help="0: all tokens")
    parser.add_argument("--top-p", type=real(0, 1, open_low=True), default=1.0)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, help="write the generations (and GSM8K figures) as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    try:
        sampling.check()
        if not args.prompt and args.gsm8k is None:
            raise ValueError("give --prompt or --gsm8k")
        if args.max_new_tokens < 1 or (args.limit is not None and args.limit < 1):
            raise ValueError("--max-new-tokens and --limit must be >= 1")
        if args.out and args.out.is_dir():  # found only when the JSON was written, after the generations
            raise ValueError(f"--out {args.out} is a folder; give the path of the JSON file to write")
        if args.out:  # generations written over the model's config.json or the problems they answer
            check_not_input(args.out, {"--gsm8k file": args.gsm8k}, {"model folder": args.model})
        problems = read_problems(args.gsm8k)[: args.limit] if args.gsm8k else []
        gen = Generator(*load_transformer(args.model, args.device))
        gen.prompt_ids("", args.chat)  # refuses --chat without chat tokens before generating
    except (ValueError, ModelLoadError, GSM8KDataError, OSError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    report: dict = {"model": str(args.model), "chat": args.chat, "generations": []}
    for prompt in args.prompt:
        text = gen(prompt, args.chat, args.max_new_tokens, sampling)
        report["generations"].append({"prompt": prompt, "text": text})
        print(text, flush=True)
    if problems:
        texts, report["gsm8k"] = answer_gsm8k(gen, problems, args.chat, args.max_new_tokens)
        report["generations"] += [{"prompt": p.question, "text": t} for p, t in zip(problems, texts, strict=True)]
        print(json.dumps(report["gsm8k"]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(args.out, (json.dumps(report, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
