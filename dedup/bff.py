"""BFF: DCLM's Bloom-filter fuzzy dedup (``dedup/bff`` in mlfoundations/dclm, ``--remove-type old-both``).

Why: DCLM-Baseline dedups with one Bloom filter of word n-grams instead of MinHash-LSH: a paragraph whose
n-grams are mostly already in the filter is cut, a document whose n-grams are mostly in it is dropped.
Memory is the filter alone, fixed up front by the expected n-gram count and the false-positive rate.

The rules, as DCLM's ``process_line_oldboth``:

* paragraphs are the windows between newlines (a paragraph after the first starts at its ``\\n``, so
  cutting it also cuts the newline before it);
* tokens are the Unicode (UAX #29) word-boundary segments that are not whitespace (Rust's
  ``split_word_bounds``; here the ``regex`` module's ``(?w)`` boundaries);
* a paragraph of at least ``max_ngram`` tokens gives its sliding ``max_ngram``-grams, one of
  ``min_ngram`` to ``max_ngram - 1`` tokens gives one n-gram of all of them, a shorter one none (it is kept);
* a paragraph is cut when more than ``threshold`` of its n-grams are in the filter (all checked before any
  is added); otherwise all its n-grams are added;
* the document is dropped when more than ``threshold`` of all its n-grams were in the filter, or when
  nothing but whitespace is left.

The filter is order-dependent: the first copy stays, later ones go. Here documents are seen in input
order (task rank, then position), one at a time, so a run's decisions are deterministic; DCLM's threads
share one filter in whatever order they reach it, and its hash seeds are random per run.
Hashing: one xxh64 per token and n consecutive token hashes combined in numpy (``dedup.shingles``), salted
by the dedup group (the dump); the ``k`` bit positions of an n-gram are ``h1 + i * h2 mod m`` (double
hashing, Kirsch and Mitzenmacher 2006) for a whole document at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import regex

from dedup.minhash import fmix64
from dedup.shingles import batch_shingles

WORD_BOUNDS = regex.compile(r"(?V1w)\b")
_NEWLINE = re.compile("\n")
_SECOND = np.uint64(0xC2B2AE3D27D4EB4F)


def false_positive_rate(size_bytes: int, expected_ngrams: int, hashers: int) -> float:
    """Chance that an absent n-gram looks present once ``expected_ngrams`` are in: (1 - (1 - 1/m)^(kn))^k."""
    m = size_bytes * 8
    return (1.0 - math.exp(expected_ngrams * hashers * math.log1p(-1.0 / m))) ** hashers


def optimal_hashers(size_bytes: int, expected_ngrams: int) -> int:
    """DCLM's hash count for a filter: ceil(m / n * ln 2)."""
    return max(1, math.ceil(size_bytes * 8 / expected_ngrams * math.log(2)))


def filter_bytes(expected_ngrams: int, fp_rate: float) -> int:
    """The smallest filter (bytes) whose false-positive rate, with its optimal hash count, is <= ``fp_rate``
    (DCLM's ``compute_bloom_size``: a binary search over the size, not the closed form, because k is rounded)."""
    if expected_ngrams < 1 or not 0.0 < fp_rate < 1.0:
        raise ValueError(f"BFF needs expected n-grams >= 1 and 0 < fp rate < 1, got {expected_ngrams} and {fp_rate}")

    def fp(size: int) -> float:
        return false_positive_rate(size, expected_ngrams, optimal_hashers(size, expected_ngrams))

    lo, hi = 1, 1
    while fp(hi) > fp_rate:
        lo, hi = hi, hi * 2
    while lo < hi:  # fp(hi) <= rate; find the smallest such size
        mid = (lo + hi) // 2
        if fp(mid) > fp_rate:
            lo = mid + 1
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class FilterSize:
    """What a BFF run allocates, said before it starts."""

    expected_ngrams: int
    fp_rate: float
    size_bytes: int
    hashers: int

    @classmethod
    def for_rate(cls, expected_ngrams: int, fp_rate: float) -> FilterSize:
        size = filter_bytes(expected_ngrams, fp_rate)
        return cls(expected_ngrams, fp_rate, size, optimal_hashers(size, expected_ngrams))

    @property
    def expected_fp(self) -> float:
        return false_positive_rate(self.size_bytes, self.expected_ngrams, self.hashers)

    def describe(self) -> str:
        return (
            f"BFF filter: {self.size_bytes / 2**20:,.1f} MiB ({self.size_bytes:,} bytes), {self.hashers} hashes, "
            f"for {self.expected_ngrams:,} expected n-grams at a false-positive rate of {self.fp_rate:g} "
            f"(computed {self.expected_fp:.3g})"
        )


class BloomFilter:
    """A bit array of ``size_bytes`` (numpy uint8) with ``hashers`` positions per key."""

    def __init__(self, size_bytes: int, hashers: int, bits: np.ndarray | None = None) -> None:
        self.bits = np.zeros(size_bytes, dtype=np.uint8) if bits is None else bits
        if self.bits.dtype != np.uint8 or len(self.bits) != size_bytes:
            raise ValueError(f"a filter of {size_bytes} bytes, got {self.bits.dtype} x {len(self.bits)}")
        self.hashers = hashers
        self._m = np.uint64(size_bytes * 8)
        self._steps = np.arange(hashers, dtype=np.uint64)

    def positions(self, keys: np.ndarray) -> np.ndarray:
        """(len(keys), hashers) bit positions: h1 + i * h2 mod m, h2 odd."""
        h2 = fmix64(keys ^ _SECOND) | np.uint64(1)
        return (keys[:, None] + self._steps[None, :] * h2[:, None]) % self._m

    def locate(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(byte index, bit mask), each (len(keys), hashers): where each key's bits are."""
        positions = self.positions(keys)
        return (positions >> np.uint64(3)).astype(np.intp), np.left_shift(1, positions & np.uint64(7)).astype(np.uint8)

    def contains(self, where: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Per located key: whether every bit is set."""
        index, mask = where
        return (self.bits[index] & mask).astype(bool).all(axis=1)

    def add(self, where: tuple[np.ndarray, np.ndarray]) -> None:
        index, mask = where
        np.bitwise_or.at(self.bits, index.ravel(), mask.ravel())

    def fill(self) -> float:
        """Fraction of bits set (the false-positive rate now is about fill ** hashers)."""
        return float(np.unpackbits(self.bits).mean()) if len(self.bits) <= 1 << 26 else _sampled_fill(self.bits)


def _sampled_fill(bits: np.ndarray) -> float:
    step = len(bits) // (1 << 24)
    return float(np.unpackbits(bits[::step]).mean())


@dataclass(frozen=True)
class BffParams:
    max_ngram: int = 13
    min_ngram: int = 13
    threshold: float = 0.8


@dataclass
class BffDecision:
    """One document's outcome: dropped whole, or the paragraph windows cut (character offsets)."""

    drop: bool
    cut: list[tuple[int, int]]
    contained: int
    ngrams: int

    def text_after(self, text: str) -> str:
        return cut_text(text, self.cut)


def cut_text(text: str, cut: Sequence[tuple[int, int]]) -> str:
    """``text`` without the (sorted, disjoint) windows in ``cut``."""
    pieces, last = [], 0
    for start, end in cut:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def paragraph_windows(text: str) -> list[tuple[int, int]]:
    """DCLM's paragraph windows: [0, first \\n), [first \\n, second \\n), ..., [last \\n, end)."""
    cuts = [0, *(m.start() for m in _NEWLINE.finditer(text)), len(text)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def tokens(paragraph: str) -> list[str]:
    """UAX #29 word-boundary segments that are not whitespace (DCLM's ``tokenize``)."""
    return [t for t in WORD_BOUNDS.split(paragraph) if t and not t.isspace()]


def paragraph_ngrams(texts: Sequence[str], salts: Sequence[int], params: BffParams) -> tuple:
    """For a batch: per document its windows, and for all paragraphs at once their n-gram hashes
    (salted) with ``bounds[p]:bounds[p + 1]`` the n-grams of paragraph ``p`` (in document order)."""
    windows = [paragraph_windows(t) for t in texts]
    words: list[list[str]] = []
    salt_per_paragraph: list[int] = []
    for text, wins, salt in zip(texts, windows, salts, strict=True):
        for start, end in wins:
            toks = tokens(text[start:end])
            words.append(toks if len(toks) >= params.min_ngram else [])
        salt_per_paragraph += [salt] * len(wins)
    hashes, offsets, positions = batch_shingles(words, params.max_ngram, "words")
    counts = np.zeros(len(words), dtype=np.int64)
    counts[positions] = np.diff(offsets)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    salt_array = np.array(salt_per_paragraph, dtype=np.uint64)
    keys = hashes ^ np.repeat(salt_array, counts) if len(hashes) else hashes
    return windows, keys, bounds


class BffDeduper:
    """Applies the rules to documents in the order given, updating one filter."""

    def __init__(self, bloom: BloomFilter, params: BffParams | None = None) -> None:
        self.bloom = bloom
        self.params = params or BffParams()

    def decide_all(self, texts: Sequence[str], batch: int = 256) -> list[BffDecision]:
        """``decide`` over ``texts`` in batches, one dedup group."""
        chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        return [d for chunk in chunks for d in self.decide(chunk, [0] * len(chunk))]

    def decide(self, texts: Sequence[str], salts: Sequence[int]) -> list[BffDecision]:
        windows, keys, bounds = paragraph_ngrams(texts, salts, self.params)
        threshold = self.params.threshold
        decisions, p = [], 0
        for text, wins in zip(texts, windows, strict=True):
            cut: list[tuple[int, int]] = []
            contained = total = 0
            first = int(bounds[p])
            index, mask = self.bloom.locate(keys[first : bounds[p + len(wins)]])  # one document's: 9 B per bit
            for window in wins:
                a, b = int(bounds[p]) - first, int(bounds[p + 1]) - first
                p += 1
                if a == b:
                    continue
                rows = index[a:b], mask[a:b]
                found = int(self.bloom.contains(rows).sum())
                contained, total = contained + found, total + (b - a)
                if found / (b - a) > threshold:
                    cut.append(window)
                else:
                    self.bloom.add(rows)
            drop = (total > 0 and contained / total > threshold) or (bool(cut) and not cut_text(text, cut).strip())
            decisions.append(BffDecision(drop, [] if drop else cut, contained, total))
        return decisions
