"""Compression of a tokenizer (against a reference on the same text, when given): UTF-8 bytes per token.

    python -m tokenizer.evaluate --tokenizer out/tokenizer --text out/sample held_out.parquet wiki.txt \
        --reference ../shared/data/reference_tokenizer_gpt_neo

`--text` takes what `tokenizer.train --input` takes (a run directory: its kept documents; a parquet
folder; a quoted glob; a file) and also .jsonl[.gz] (field `text`) and plain text files; one row per
argument. A missing or unreadable input is one `error:` line (exit 2), before anything is measured.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from common.cli import ArgumentParser, errors_as_one_line
from tokenizer.artifacts import load_tokenizer
from tokenizer.inputs import resolve_parquet
from tokenizer.texts import iter_text_batches


@dataclass
class Compression:
    """Bytes and token counts of one tokenizer on one input (special tokens never added)."""

    documents: int
    bytes: int
    tokens: int

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens if self.tokens else 0.0


def measure(tok: Tokenizer, batches: Iterable[list[str]]) -> Compression:
    """Count UTF-8 bytes and tokens over all documents; the same documents for every tokenizer."""
    docs = nbytes = ntokens = 0
    for batch in batches:
        docs += len(batch)
        nbytes += sum(len(t.encode("utf-8")) for t in batch)
        ntokens += sum(len(e) for e in tok.encode_batch_fast(batch, add_special_tokens=False))
    return Compression(docs, nbytes, ntokens)


PathLike = str | os.PathLike[str]


def text_files(item: PathLike) -> list[Path]:
    """The files one --text argument names: a file itself, else what `tokenizer.train --input` reads there
    (a run directory's kept documents, a folder's parquet, a glob's files)."""
    path = Path(item)
    if path.is_file():
        return [path]
    if not path.is_dir() and not glob.has_magic(str(item)):
        raise FileNotFoundError(f"--text {item}: no such file or directory")
    try:
        files = resolve_parquet(str(item))
    except FileNotFoundError:
        raise FileNotFoundError(f"--text {item}: no parquet files there") from None
    return files


def measure_files(tok: Tokenizer | None, files: Sequence[Path]) -> Compression:
    """`measure` summed over `files` (None: no tokenizer, nothing measured)."""
    total = Compression(0, 0, 0)
    if tok is None:
        return total
    for f in files:
        try:
            part = measure(tok, iter_text_batches(f))
        except (ValueError, OSError) as err:  # not UTF-8, bad JSON, not parquet: which file, and why
            raise ValueError(f"--text {f}: {err}") from None
        total = Compression(total.documents + part.documents, total.bytes + part.bytes, total.tokens + part.tokens)
    return total


def _load(path: PathLike, flag: str) -> Tokenizer:
    try:
        return load_tokenizer(path)  # a file tokenizers cannot parse is a ValueError there ("not a tokenizer")
    except ValueError as err:
        raise ValueError(f"{flag} {path}: {err}") from None


def compare(
    tokenizer: PathLike, reference: PathLike | None, items: Sequence[PathLike]
) -> list[tuple[str, Compression, Compression]]:
    """(argument, ours, reference) for each --text argument; every input is resolved before any is measured."""
    inputs = [(str(item), text_files(item)) for item in items]
    ours = _load(tokenizer, "--tokenizer")
    ref = _load(reference, "--reference") if reference is not None else None
    return [(name, measure_files(ours, files), measure_files(ref, files)) for name, files in inputs]


def format_table(rows: list[tuple[str, Compression, Compression]]) -> str:
    lines = [f"{'input':<48} {'docs':>6} {'bytes':>11} {'ours B/tok':>10} {'ref B/tok':>10} {'ours/ref':>8}"]
    for name, ours, ref in rows:
        ratio = f"{ours.bytes_per_token / ref.bytes_per_token:>8.3f}" if ref.tokens else f"{'-':>8}"
        ref_bpt = f"{ref.bytes_per_token:>10.3f}" if ref.tokens else f"{'-':>10}"
        lines.append(
            f"{Path(name).name[-48:]:<48} {ours.documents:>6} {ours.bytes:>11,} "
            f"{ours.bytes_per_token:>10.3f} {ref_bpt} {ratio}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(
        prog="python -m tokenizer.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json or its folder")
    parser.add_argument("--reference", help="reference tokenizer.json or its folder (default: ours alone)")
    parser.add_argument(
        "--text",
        nargs="+",
        required=True,
        help="run dirs, parquet folders, quoted globs, .parquet / .jsonl[.gz] (field text) / text files",
    )
    args = parser.parse_args(argv)
    # a missing input, bad JSON or parquet, non-UTF-8 text, a tokenizer file that does not load
    with errors_as_one_line(ValueError, OSError):
        rows = compare(args.tokenizer, args.reference, args.text)
    print(format_table(rows))


if __name__ == "__main__":
    main()
