"""Chat tokens: reserved after the merges (documents encode as before), rendered by transformers' template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.support.text_corpora import web_documents
from tokenizer.chat import CHAT_TOKENS
from tokenizer.train import train_tokenizer


def test_chat_tokens_leave_document_encodings_unchanged(tok4k: Path, run_dir: Path, tmp_path: Path) -> None:
    plain = train_tokenizer(run_dir, tmp_path / "plain", vocab_size=4096 - 3, chat_tokens=False, progress=False)
    with_chat = Tokenizer.from_file(str(tok4k / "tokenizer.json"))
    without = Tokenizer.from_file(str(plain.path))
    assert with_chat.get_vocab_size() == 4096 and without.get_vocab_size() == 4093
    assert [with_chat.token_to_id(t) for t in CHAT_TOKENS] == [4093, 4094, 4095]
    texts = [r["text"] for r in web_documents()]
    ours = [e.ids for e in with_chat.encode_batch(texts)]
    theirs = [e.ids for e in without.encode_batch(texts)]
    assert ours == theirs and sum(map(len, ours)) > 100_000
    assert "chat_template" not in json.loads((tmp_path / "plain" / "tokenizer_config.json").read_text())


def test_apply_chat_template_renders_the_chat_format(tok4k: Path) -> None:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(tok4k))
    messages = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "5\n#### 5"}]
    text = auto.apply_chat_template(messages, tokenize=False)
    assert text == "<|user|>What is 2+3?<|end|><|assistant|>5\n#### 5<|end|>"
    prompt = auto.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>What is 2+3?<|end|><|assistant|>"
    tok = Tokenizer.from_file(str(tok4k / "tokenizer.json"))
    ids = tok.encode(prompt).ids
    assert ids[0] == tok.token_to_id("<|user|>") and ids[-1] == tok.token_to_id("<|assistant|>")
    assert auto.decode(ids) == prompt
