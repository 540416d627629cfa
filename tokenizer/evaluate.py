"""Compression of a tokenizer against a reference on the same text: UTF-8 bytes per token.

    python -m tokenizer.evaluate --tokenizer out/tokenizer --text held_out.parquet wiki.txt \
        --reference ../shared/data/reference_tokenizer_gpt_neo
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from tokenizer.artifacts import load_tokenizer
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


def compare(
    tokenizer: PathLike, reference: PathLike, files: Sequence[PathLike]
) -> list[tuple[str, Compression, Compression]]:
    """(file, ours, reference) for each input file."""
    ours, ref = load_tokenizer(tokenizer), load_tokenizer(reference)
    return [(str(f), measure(ours, iter_text_batches(f)), measure(ref, iter_text_batches(f))) for f in files]


def format_table(rows: list[tuple[str, Compression, Compression]]) -> str:
    lines = [f"{'input':<48} {'docs':>6} {'bytes':>11} {'ours B/tok':>10} {'ref B/tok':>10} {'ours/ref':>8}"]
    for name, ours, ref in rows:
        ratio = ours.bytes_per_token / ref.bytes_per_token if ref.tokens else float("nan")
        lines.append(
            f"{Path(name).name[-48:]:<48} {ours.documents:>6} {ours.bytes:>11,} "
            f"{ours.bytes_per_token:>10.3f} {ref.bytes_per_token:>10.3f} {ratio:>8.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tokenizer.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json or its folder")
    parser.add_argument("--reference", required=True, help="reference tokenizer.json or its folder")
    parser.add_argument("--text", nargs="+", required=True, help=".parquet / .jsonl[.gz] (field text) / text")
    args = parser.parse_args(argv)
    print(format_table(compare(args.tokenizer, args.reference, args.text)))


if __name__ == "__main__":
    main()
