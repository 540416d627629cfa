"""Conversations for supervised fine-tuning: read, check, encode with a response mask, pack into rows.

A conversation is a list of `{"role": "user"|"assistant", "content": str}` turns, user first,
alternating, with at least one assistant turn. A JSONL line holds either `messages` (such a list) or
the instructions file's `question` / `answer` (GSM8K: calculator annotations `<<48/2=24>>` removed).

Each conversation is encoded turn by turn in the chat format (`tokenizer.chat`): the ids equal those
of the whole rendered text (special tokens split the text first), and the mask is True exactly on the
assistant's content and its closing `<|end|>`: the tokens the loss is taken on. `<|endoftext|>` ends
each conversation, so a packed row's document masking (attention and positions stop at it) scores
every conversation as it would score alone.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from common.bounded_input import loads_json, open_bounded
from tokenizer.chat import CHAT_TOKENS, ROLES
from tokenizer.model import EOT

Conversation = list[dict[str, str]]
_CALCULATOR = re.compile(r"<<[^<>]*>>")


class SFTDataError(ValueError):
    """A conversation file or tokenizer that SFT cannot use: a one-line error."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines; a FIFO or device is refused and the (decompressed) bytes are capped, so a
    3 GiB file of zeros given as --sft is one line of refusal, not a read of 3 GiB (issue 30's audit)."""
    with io.TextIOWrapper(open_bounded(path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, line


def check_conversation(messages: Any, where: str) -> Conversation:
    """The turns when they alternate user, assistant, ... with an assistant turn; else SFTDataError."""
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"{where}: `messages` must be a non-empty list")
    for i, turn in enumerate(messages):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES or not isinstance(turn.get("content"), str):
            raise SFTDataError(f"{where}: turn {i} must be {{role: user|assistant, content: str}}, got {turn!r:.80}")
        expected = "user" if i % 2 == 0 else "assistant"
        if turn["role"] != expected:
            raise SFTDataError(f"{where}: roles out of order: turn {i} is {turn['role']}, expected {expected}")
    if len(messages) < 2:
        raise SFTDataError(f"{where}: no assistant turn")
    return [{"role": t["role"], "content": t["content"]} for t in messages]


def conversation_of(record: Any, where: str) -> Conversation:
    """One JSONL record as a conversation: `messages`, or `question` + `answer` (calculator marks removed)."""
    if isinstance(record, dict) and "messages" in record:
        return check_conversation(record["messages"], where)
    if isinstance(record, dict) and isinstance(record.get("question"), str):
        if not isinstance(record.get("answer"), str):
            raise SFTDataError(f"{where}: no assistant turn (`question` without a string `answer`)")
        answer = _CALCULATOR.sub("", record["answer"])
        return [{"role": "user", "content": record["question"]}, {"role": "assistant", "content": answer}]
    raise SFTDataError(f"{where}: a record needs `messages` or `question` and `answer`")


def read_conversations(path: str | Path) -> list[Conversation]:
    """Every conversation of a JSONL(.gz) file, checked; the first bad line raises SFTDataError."""
    path = Path(path)
    if not path.exists():
        raise SFTDataError(f"conversation file {path} does not exist")
    out = []
    try:
        for number, line in _lines(path):
            try:
                record = loads_json(line, path)
            except ValueError:
                raise SFTDataError(f"{path}:{number}: not JSON") from None
            out.append(conversation_of(record, f"{path}:{number}"))
    except (OSError, UnicodeDecodeError, EOFError) as err:
        raise SFTDataError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if not out:
        raise SFTDataError(f"{path}: no conversations")
    return out


@dataclass(frozen=True)
class ChatIds:
    """The ids of the chat tokens and the separator in one tokenizer."""

    user: int
    assistant: int
    end: int
    eot: int

    @classmethod
    def of(cls, tok: Tokenizer, where: str = "tokenizer") -> ChatIds:
        ids = [tok.token_to_id(t) for t in (*CHAT_TOKENS, EOT)]
        if any(i is None for i in ids):
            missing = [t for t, i in zip((*CHAT_TOKENS, EOT), ids, strict=True) if i is None]
            raise SFTDataError(f"{where} lacks the chat tokens {' '.join(missing)} (tokenizer.train reserves them)")
        return cls(*ids)  # type: ignore[arg-type]


class ChatEncoder:
    """Conversation -> (ids, response mask), in the format of `tokenizer.chat.CHAT_TEMPLATE`."""

    def __init__(self, tok: Tokenizer, where: str = "tokenizer") -> None:
        self.tok, self.ids = tok, ChatIds.of(tok, where)

    def _text(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids if text else []

    def encode(self, conversation: Conversation, eot: bool = True) -> tuple[list[int], list[bool]]:
        ids: list[int] = []
        mask: list[bool] = []
        for turn in conversation:
            body = self._text(turn["content"]) + [self.ids.end]
            ids += [self.ids.user if turn["role"] == "user" else self.ids.assistant] + body
            mask += [False] + [turn["role"] == "assistant"] * len(body)
        if eot:
            ids.append(self.ids.eot)
            mask.append(False)
        return ids, mask

    def prompt(self, conversation: Conversation) -> list[int]:
        """The ids `apply_chat_template(..., add_generation_prompt=True)` gives: the turns, then `<|assistant|>`."""
        ids, _ = self.encode(conversation, eot=False)
        return ids + [self.ids.assistant]


@dataclass
class Rows:
    """Fixed-length rows of `seq_len + 1` ids and the mask of the ids the loss is taken on (as targets)."""

    tokens: torch.Tensor  # (N, seq_len + 1) int64
    mask: torch.Tensor  # (N, seq_len + 1) bool
    dropped_too_long: int = 0

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def targets(self) -> int:
        """Response tokens the loss is taken on: mask of positions 1.. (position 0 is never a target)."""
        return int(self.mask[:, 1:].sum())


def pack(encoded: list[tuple[list[int], list[bool]]], seq_len: int, pad_id: int, packed: bool = True) -> Rows:
    """Conversations, in order, into rows of seq_len + 1 ids, several per row when `packed` (a conversation
    never straddles two rows), padded with `pad_id` (the separator: masked, a document of its own). A
    conversation longer than a row is dropped and counted."""
    width = seq_len + 1
    rows: list[tuple[list[int], list[bool]]] = []
    current: tuple[list[int], list[bool]] = ([], [])
    dropped = 0
    for ids, mask in encoded:
        if len(ids) > width:
            dropped += 1
            continue
        if current[0] and (not packed or len(current[0]) + len(ids) > width):
            rows.append(current)
            current = ([], [])
        current = (current[0] + ids, current[1] + mask)
    if current[0]:
        rows.append(current)
    tokens = np.full((len(rows), width), pad_id, dtype=np.int64)
    masks = np.zeros((len(rows), width), dtype=bool)
    for r, (ids, mask) in enumerate(rows):
        tokens[r, : len(ids)] = ids
        masks[r, : len(mask)] = mask
    return Rows(torch.from_numpy(tokens), torch.from_numpy(masks), dropped)


def encode_rows(conversations: list[Conversation], encoder: ChatEncoder, seq_len: int, packed: bool = True) -> Rows:
    return pack([encoder.encode(c) for c in conversations], seq_len, encoder.ids.eot, packed)


def split_held_out(conversations: list[Conversation], held_out: int, seed: int) -> tuple[list, list]:
    """(train, held-out): a seeded shuffle, the last `held_out` conversations held out."""
    if not 0 <= held_out < len(conversations):
        raise SFTDataError(f"cannot hold out {held_out} of {len(conversations)} conversations")
    order = np.random.default_rng(seed).permutation(len(conversations))
    shuffled = [conversations[i] for i in order]
    cut = len(shuffled) - held_out
    return shuffled[:cut], shuffled[cut:]
