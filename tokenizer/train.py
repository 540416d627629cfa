"""Train a byte-level BPE tokenizer on curated documents.

python -m tokenizer.train --input out/CC-MAIN-2024-10 --vocab-size 32768 --out out/tokenizer
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenizers import pre_tokenizers, trainers

from common.cli import SEED, ArgumentParser, errors_as_one_line, integer
from common.lock import FolderLock, check_apart, check_local_output, check_writable, refuse_being_written
from tokenizer.artifacts import tokenizer_sha256, write_tokenizer_dir
from tokenizer.chat import CHAT_TOKENS
from tokenizer.corpus import SampleStats, sample_texts
from tokenizer.inputs import check_parquet_columns, resolve_parquet
from tokenizer.model import EOT, new_bpe
from tokenizer.pattern import WORD_STYLES, split_pattern

DEFAULT_CHAR_BUDGET = 2_000_000_000
DEFAULT_DOC_CHAR_CAP = 100_000


@dataclass
class TrainResult:
    """Where the tokenizer went and what it was trained on."""

    path: Path
    sha256: str
    vocab_size: int
    eot_id: int
    documents: int
    chars: int
    seconds: float
    vocab_size_requested: int = 0
    min_frequency: int = 2

    def shortfall(self) -> str | None:
        """A warning when BPE stopped short of the vocabulary asked for (it runs out of pairs seen
        --min-frequency times in the sample): a smaller vocab than asked must not pass without a word."""
        if self.vocab_size >= self.vocab_size_requested:
            return None
        return (
            f"warning: vocab {self.vocab_size} of the {self.vocab_size_requested} asked: the {self.chars:,} sampled "
            f"chars hold no more pairs seen >= {self.min_frequency} times; more text or a lower --min-frequency "
            "gives more merges"
        )


# A byte-level BPE holds the 256 byte tokens, <|endoftext|> and the chat tokens beside its merges, and the
# shard writer stores ids as uint16 or uint32 (mixtures/build.py): the vocab must lie in between.
MIN_VOCAB = 256 + 1 + len(CHAT_TOKENS) + 1
MAX_VOCAB = 1 << 32


def check_sizes(
    vocab_size: int, char_budget: int, doc_char_cap: int, max_digits: int | None, min_frequency: int
) -> None:
    """Raise ValueError (one line) for a size no training can honour, before any file is read or written."""
    if not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise ValueError(
            f"vocab_size must be in [{MIN_VOCAB}, {MAX_VOCAB}] (256 bytes + {EOT} + chat tokens + a merge; "
            f"ids fit uint32), got {vocab_size}"
        )
    for name, value in (("char_budget", char_budget), ("doc_char_cap", doc_char_cap), ("min_frequency", min_frequency)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if max_digits is not None and max_digits < 0:
        raise ValueError(f"max_digits must be >= 0 (0: unlimited), got {max_digits}")


def train_tokenizer(
    inputs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    vocab_size: int = 32768,
    char_budget: int = DEFAULT_CHAR_BUDGET,
    doc_char_cap: int = DEFAULT_DOC_CHAR_CAP,
    max_digits: int | None = 3,
    number_space: bool = True,
    min_frequency: int = 2,
    seed: int = 0,
    column: str = "text",
    progress: bool = True,
    words: str = "gpt4o",
    chat_tokens: bool = True,
) -> TrainResult:
    """Train on a seeded sample of the parquet documents in `inputs`; write the tokenizer folder.

    With `chat_tokens` the last ids of the vocabulary are `tokenizer.chat.CHAT_TOKENS`, added after the
    merges are learned: BPE learns `vocab_size - 3` merges, so documents encode exactly as with a
    tokenizer of that many merges and no chat tokens (ids included), and `vocab_size` stays the total.
    """
    check_sizes(vocab_size, char_budget, doc_char_cap, max_digits, min_frequency)
    check_writable(out_dir)
    start = time.perf_counter()
    files = resolve_parquet(inputs)
    check_inputs_apart(files, out_dir, column)
    pattern = split_pattern(max_digits=max_digits, number_space=number_space, words=words)
    tok = new_bpe(pattern)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - (len(CHAT_TOKENS) if chat_tokens else 0),
        min_frequency=min_frequency,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    stats = SampleStats()
    batches = sample_texts(files, char_budget, doc_char_cap, seed=seed, column=column, progress=progress, stats=stats)
    tok.train_from_iterator(batches, trainer=trainer)
    if stats.documents_used == 0:
        raise ValueError(f"no non-empty `{column}` values in {len(files)} parquet file(s)")
    if chat_tokens:
        tok.add_special_tokens(list(CHAT_TOKENS))
    seconds = time.perf_counter() - start
    training = {
        "inputs": [str(f) for f in files],
        "vocab_size_requested": vocab_size,
        "vocab_size": tok.get_vocab_size(),
        "split_pattern": pattern,
        "split_words": words,
        "char_budget": char_budget,
        "doc_char_cap": doc_char_cap,
        "min_frequency": min_frequency,
        "seed": seed,
        "separator": {"token": EOT, "placement": "appended after each document by the shard writer"},
        "chat_tokens": list(CHAT_TOKENS) if chat_tokens else [],
        "sample": asdict(stats),
        "seconds": round(seconds, 3),
    }
    # one writer per output folder: two trainings into one interleaved their files (the lock's file stays there)
    with FolderLock(out_dir, "tokenizer training"):
        path = write_tokenizer_dir(tok, Path(out_dir), training)
    return TrainResult(
        path=path,
        sha256=tokenizer_sha256(path),
        vocab_size=tok.get_vocab_size(),
        eot_id=tok.token_to_id(EOT),
        documents=stats.documents_used,
        chars=stats.chars_used,
        seconds=seconds,
        vocab_size_requested=vocab_size,
        min_frequency=min_frequency,
    )


def check_inputs_apart(files: list[Path], out_dir: str | os.PathLike[str], column: str) -> None:
    """Before anything is written: `out_dir` is apart from every folder of input documents (a tokenizer
    written into curated/ is read as a document folder by the next stage), and each input is a parquet
    file with `column` (its footer only; a missing column was an IndexError from deep in the sampler)."""
    for folder in {f.parent for f in files}:
        check_apart(out_dir, {"input documents": folder})
    check_parquet_columns(files, column)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m tokenizer.train", description=__doc__.splitlines()[0])
    parser.add_argument("--input", nargs="+", required=True, help="run dirs, parquet folders, globs, files")
    parser.add_argument("--out", required=True, help="output folder for tokenizer.json and friends")
    parser.add_argument("--vocab-size", type=integer(MIN_VOCAB, MAX_VOCAB), default=32768)
    parser.add_argument(
        "--char-budget", type=integer(1, 1 << 40), default=DEFAULT_CHAR_BUDGET, help="characters to sample"
    )
    parser.add_argument(
        "--doc-char-cap", type=integer(1, 1 << 40), default=DEFAULT_DOC_CHAR_CAP, help="chars kept per doc"
    )
    parser.add_argument("--max-digits", type=integer(0, 1 << 10), default=3, help="digit group size; 0 = unlimited")
    parser.add_argument("--no-number-space", action="store_true", help="GPT-4 exact: no space before numbers")
    parser.add_argument("--words", choices=WORD_STYLES, default="gpt4o", help="word split rule (pattern.py)")
    parser.add_argument("--min-frequency", type=integer(1, 1 << 40), default=2)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--column", default="text")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--no-chat-tokens", action="store_true", help="do not reserve <|user|> <|assistant|> <|end|>")
    args = parser.parse_args(argv)
    with errors_as_one_line(ValueError, OSError):  # bad sizes, missing or unreadable inputs, unwritable --out
        result = _train_from_args(args)
    print(
        f"wrote {result.path} (vocab {result.vocab_size}, {EOT} id {result.eot_id}, "
        f"sha256 {result.sha256[:12]}) from {result.documents} documents, "
        f"{result.chars:,} chars in {result.seconds:.1f}s"
    )
    if result.shortfall():
        print(result.shortfall(), file=sys.stderr)


def _train_from_args(args: argparse.Namespace) -> TrainResult:
    check_local_output(args.out, "tokenizer.train")
    refuse_being_written(args.input, "tokenizer training")  # a run still curating: part of its documents
    if args.max_digits < 0:  # 0 means unlimited on the command line, None in the API
        raise ValueError(f"--max-digits must be >= 0 (0: unlimited), got {args.max_digits}")
    return train_tokenizer(
        args.input,
        args.out,
        vocab_size=args.vocab_size,
        char_budget=args.char_budget,
        doc_char_cap=args.doc_char_cap,
        max_digits=args.max_digits or None,
        number_space=not args.no_number_space,
        min_frequency=args.min_frequency,
        seed=args.seed,
        column=args.column,
        progress=not args.quiet,
        words=args.words,
        chat_tokens=not args.no_chat_tokens,
    )


if __name__ == "__main__":
    main()
