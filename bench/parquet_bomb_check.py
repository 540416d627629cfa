"""What the parquet decompression-bomb check costs on an ordinary documents file, against a plain read.

    python -m bench.parquet_bomb_check [--file DOCS.parquet] [--text-mb 150] [--repeats 3]

Without ``--file``, writes a documents file into a temp folder: ``--text-mb`` MB of text (default 150,
which zstd stores in ~70 MB) as documents of 200-2,000 words drawn by frequency from WikiText-2's words
(``../shared/data/wikitext2_articles``), an ``id`` and a ``text`` column, zstd, pyarrow's defaults
otherwise (dictionary pages, one row group). Prints the best of ``--repeats`` wall times of:

- the plain read of the ``text`` column (``pq.read_table``): what tokenizer.train and mixtures.build pay anyway;
- the exact count of the decoded bytes by dictionary indices (``decoded_dictionary_bytes``): the check's
  only pass before the footer-and-dictionary-page bound, and still its fallback when that bound passes the cap;
- the check as it runs now (``refuse_parquet_bomb``), with the bytes of the file it read.
"""

from __future__ import annotations

import collections
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.bounded_input import MAX_DATA_BYTES, decoded_dictionary_bytes, refuse_parquet_bomb
from common.cli import ArgumentParser
from tests.support.counting_file import CountingFile

WORDS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext2_articles" / "wiki.valid.txt"


def write_documents(path: Path, text_mb: int, seed: int = 0) -> int:
    """A zstd documents file of about `text_mb` MB of text; the number of documents."""
    counts = collections.Counter(re.findall(r"\S+", WORDS.read_text()))
    vocab = np.array(list(counts), dtype=object)
    p = np.array(list(counts.values()), dtype=float)
    p /= p.sum()
    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < text_mb << 20:
        docs.append(" ".join(vocab[rng.choice(len(vocab), int(rng.integers(200, 2000)), p=p)]))
        total += len(docs[-1])
    pq.write_table(pa.table({"id": [str(i) for i in range(len(docs))], "text": docs}), path, compression="zstd")
    return len(docs)


def best_of(repeats: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(path: Path, repeats: int) -> None:
    size = path.stat().st_size
    groups = list(range(pq.ParquetFile(path).metadata.num_row_groups))
    print(f"{path}: {size / 1e6:.1f} MB on disk, {len(groups)} row group(s)")
    plain = best_of(repeats, lambda: pq.read_table(path, columns=["text"]))

    def exact() -> None:
        with path.open("rb") as handle:
            decoded_dictionary_bytes(handle, "text", groups, 1 << 62)

    def check() -> None:
        with CountingFile(path) as handle:
            refuse_parquet_bomb(handle, str(path), "text", size)
            reads.append(handle.read_bytes)

    reads: list[int] = []
    counted = best_of(repeats, exact)
    now = best_of(repeats, check)
    print(f"plain read of the text column:        {plain:6.2f} s")
    print(f"exact count by dictionary indices:    {counted:6.2f} s  ({counted / (size / 1e6) * 1e3:.1f} ms/MB on disk)")
    print(f"the check (bound, exact if needed):   {now:6.3f} s  (read {reads[-1] / 1e6:.2f} MB of the file)")
    print(f"cap for this file: {max(MAX_DATA_BYTES, 200 * size):,} bytes decoded")


def main() -> None:
    parser = ArgumentParser(prog="python -m bench.parquet_bomb_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, help="a documents parquet file with a `text` column")
    parser.add_argument("--text-mb", type=int, default=150, help="MB of text of the generated file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.file is not None:
        measure(args.file, args.repeats)
        return
    with tempfile.TemporaryDirectory(prefix="bomb-check-") as tmp:
        path = Path(tmp) / "docs.parquet"
        print(f"writing {args.text_mb} MB of documents ({write_documents(path, args.text_mb)} documents)")
        measure(path, args.repeats)
        os.remove(path)


if __name__ == "__main__":
    main()
