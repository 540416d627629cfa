"""The chat format: the special tokens a conversation is written with, and its Jinja template.

A conversation renders as `<|user|>question<|end|><|assistant|>answer<|end|>...`; with a generation
prompt it ends in `<|assistant|>`, and the model answers until it writes `<|end|>`. The template is
written into `tokenizer_config.json`, so `transformers`' `apply_chat_template` renders exactly the
text that `trainer.sft_data` encodes piece by piece (tests/trainer/test_sft.py checks they agree).
"""

from __future__ import annotations

USER, ASSISTANT, END = "<|user|>", "<|assistant|>", "<|end|>"
CHAT_TOKENS = (USER, ASSISTANT, END)
ROLES = {"user": USER, "assistant": ASSISTANT}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '<|user|>' }}{% elif message['role'] == 'assistant' %}"
    "{{ '<|assistant|>' }}{% else %}{{ raise_exception('roles are user and assistant') }}{% endif %}"
    "{{ message['content'] }}{{ '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def has_chat_tokens(vocab: dict[str, int]) -> bool:
    """Whether a tokenizer's vocabulary holds every chat token (a tokenizer trained before they existed does not)."""
    return all(token in vocab for token in CHAT_TOKENS)
