"""Fixtures for the SFT and generation tests: a small chat tokenizer, a random tiny base model exported
to a Hugging Face folder, and arithmetic conversations in the instructions file's format. No shared data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from tokenizer.chat import CHAT_TOKENS
from tokenizer.model import EOT

QUESTIONS = "What is {a} plus {b}? Tom has {a} apples and gets {b} more. How many apples does he have?"


def arithmetic_records(n: int, seed: int = 0) -> list[dict[str, str]]:
    """GSM8K-shaped records: `question`, `answer` with a calculator annotation and a final `#### N` line."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 40), rng.randint(1, 40)
        answer = f"He has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"
        out.append({"question": QUESTIONS.format(a=a, b=b), "answer": answer})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def chat_tokenizer_dir(out: Path, chat: bool = True, vocab_size: int = 320) -> Path:
    """A byte-level BPE trained on the arithmetic text, written by the tokenizer room (config + template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tokenizer.artifacts import write_tokenizer_dir

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    text = [r["question"] + "\n" + r["answer"] for r in arithmetic_records(400, seed=99)]
    tok.train_from_iterator(text, trainer=trainer)
    if chat:
        tok.add_special_tokens(list(CHAT_TOKENS))
    write_tokenizer_dir(tok, out, {"test": True})
    return out


def tiny_base(out: Path, tokenizer_dir: Path, seed: int = 0, qk_norm: bool = False) -> Path:
    """A randomly initialised tiny model exported as a Hugging Face folder with the tokenizer beside it."""
    from tokenizers import Tokenizer

    from trainer.config import ModelConfig
    from trainer.export_hf import export_hf
    from trainer.model import Transformer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    vocab = -(-tok.get_vocab_size() // 64) * 64
    cfg = ModelConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=vocab, max_seq_len=256,
                      qk_norm=qk_norm)  # fmt: skip
    torch.manual_seed(seed)
    model = Transformer(cfg)
    eot = tok.token_to_id(EOT)
    return export_hf(model.state_dict(), cfg, out, tokenizer=tokenizer_dir / "tokenizer.json", eos_id=eot, bos_id=eot)
