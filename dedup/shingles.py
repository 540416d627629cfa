"""Word n-gram shingles hashed to uint64, for a batch of documents at once.

"text" hashing is datatrove's: xxh64 of the n words joined by single spaces, one call per
shingle (taken as slices of one joined string), so signatures are bit-identical to
``MinhashDedupSignature``. "words" (the default) hashes each word once, with one xxh64 call per
word for the whole batch, and combines n consecutive word hashes in numpy: the same shingle
sets up to 64-bit collisions, at a third of the cost. Documents with fewer than n words become
one shingle of all their words (datatrove drops them, so two identical three-word pages would
never match there).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import xxhash

from dedup.minhash import fmix64
from dedup.text import Word

_xxh64 = xxhash.xxh64_intdigest
_COMBINE = np.uint64(0x9E3779B97F4A7C15)

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


def text_shingles(words: Sequence[Word], n: int) -> np.ndarray:
    """xxh64(" ".join(words[i:i+n])) for every i, bit-identical to datatrove's get_shingles."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    joined = (b" " if isinstance(words[0], bytes) else " ").join(words)  # type: ignore[arg-type]
    if len(words) <= n:
        return np.array([_xxh64(joined)], dtype=np.uint64)
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    ends = np.cumsum(lengths + 1) - 1  # end of each word in the joined string
    count = len(words) - n + 1
    starts = (ends - lengths)[:count].tolist()
    pieces = map(joined.__getitem__, map(slice, starts, ends[n - 1 :].tolist()))
    return np.fromiter(map(_xxh64, pieces), dtype=np.uint64, count=count)


def _layout(n_words: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per shingle of the word-having documents: its document, first word index and word count."""
    counts = np.maximum(n_words - n + 1, 1)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    first = np.concatenate(([0], np.cumsum(n_words)[:-1]))
    doc = np.repeat(np.arange(len(n_words)), counts)
    word = first[doc] + (np.arange(offsets[-1]) - offsets[doc])
    return offsets, doc, word, np.minimum(n_words[doc], n)


def batch_shingles(docs: Sequence[Sequence[Word]], n: int, mode: str = "words") -> Batch:
    """(hashes, offsets, positions): shingle hashes of the documents that have words,
    concatenated and delimited by ``offsets``; ``positions`` are those documents' indices."""
    n_words = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    positions = np.flatnonzero(n_words)
    if mode == "text":
        arrays = [text_shingles(docs[i], n) for i in positions]
        offsets = np.concatenate(([0], np.cumsum([len(a) for a in arrays], dtype=np.int64)))
        flat = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.uint64)
        return flat, offsets, positions
    if mode != "words":
        raise ValueError(f"unknown shingle_hash {mode!r}; expected 'words' or 'text'")
    words = list(chain.from_iterable(docs))
    h = np.fromiter(map(_xxh64, words), dtype=np.uint64, count=len(words))
    offsets, _, word, width = _layout(n_words[positions], n)
    s = h[word]
    for k in range(1, n):
        s *= _COMBINE
        s += h[np.minimum(word + k, len(h) - 1)] * (width > k)  # short documents: fewer words
    return fmix64(s), offsets, positions
