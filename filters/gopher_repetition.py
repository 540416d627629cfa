"""Gopher repetition (Rae et al. 2021, Table A1): how much of a page is repeated lines, paragraphs, n-grams.

Definitions are datatrove's ``GopherRepetitionFilter`` exactly (its helpers are reproduced here over
our one tokenization); the signal names are datatrove's reasons, so ``dup_line_frac`` is the recipe's
``max_dup_line_frac``, the column ``gopher_repetition_dup_line_frac`` and the reason ``dup_line_frac``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass
from itertools import count

import numpy as np

from filters.rule import Bound, Rule, Signals, Verdict, column, ratio

FAMILY = "gopher_repetition"
TOP_N_GRAMS = (2, 3, 4)  # datatrove's default n of top_n_grams / dup_n_grams: the signals a run stores
DUP_N_GRAMS = (5, 6, 7, 8, 9, 10)
HASH_BASE = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64
HASH_BASE_INVERSE = pow(HASH_BASE, -1, 1 << 64)
# offsets each n's gram hashes apart before they share one sort; not a combination of small multiples of
# HASH_BASE's powers (as HASH_BASE_INVERSE is: two near-equal grams of different n would meet)
N_TAG = 0x2545F4914F6CDD1D
MAX_BUCKET_BITS = 22
PARAGRAPH_SPLIT = re.compile(r"\n{2,}")
LINE_SPLIT = re.compile("\n+")
SIGNALS = (
    "dup_para_frac",
    "dup_para_char_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    *(f"top_{n}_gram" for n in TOP_N_GRAMS),
    *(f"duplicated_{n}_n_grams" for n in DUP_N_GRAMS),
)


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """Number of repeated items and their total characters (datatrove's definition)."""
    seen: set[str] = set()
    dup_items = dup_chars = 0
    for item in items:
        if item in seen:
            dup_items += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_items, dup_chars


def word_ids(words: list[str]) -> np.ndarray:
    """Each word's rank among the distinct words in order of first appearance (equal words, equal ids)."""
    rank = dict(zip(dict.fromkeys(words), count(), strict=False))
    return np.fromiter(map(rank.__getitem__, words), dtype=np.uint64, count=len(words))


def maybe_repeated(keys: np.ndarray) -> np.ndarray:
    """Indices (ascending) of the keys that may occur more than once: those sharing a bucket with
    another key. Equal keys always do; with 8 buckets per key (Fibonacci hashing), about one distinct
    key in nine does too (fewer past ``MAX_BUCKET_BITS``, which bounds the counts' memory at 32 MB).
    One linear pass, so that the sort finding the repeats sees only these."""
    bits = min(max(len(keys).bit_length() + 3, 6), MAX_BUCKET_BITS)
    buckets = ((keys * np.uint64(HASH_BASE)) >> np.uint64(64 - bits)).astype(np.intp)
    return np.flatnonzero(np.bincount(buckets, minlength=1 << bits)[buckets] > 1)


def top_ngrams_chars(words: list[str], ns: tuple[int, ...] = TOP_N_GRAMS) -> dict[int, int]:
    """For each n of ``ns``: characters covered by the most frequent word n-gram (datatrove's
    ``find_top_duplicate`` over space-joined n-grams, whose words hold no space; first seen wins ties,
    as ``most_common``: the first n-gram when none repeats), times its count.

    Each n-gram is a number (its word ids in base ``distinct words``); ``np.unique`` counts the ones
    ``maybe_repeated`` leaves. n runs up from the smallest of ``ns``, and only positions whose
    (n-1)-gram occurs twice or more are looked at for n: elsewhere the n-gram is unique too. On prose
    that leaves few positions past n=2."""
    out: dict[int, int] = {}
    if not ns:
        return out
    ids = word_ids(words)
    base = int(ids.max()) + 1 if len(ids) else 1
    candidates = np.arange(len(words))  # positions whose (n-1)-gram repeats (all of them for the first n)
    for n in range(min(ns), max(ns) + 1):
        if base**n >= 1 << 64:  # too many distinct words for one 64-bit key
            out.update({m: _top_ngram_chars_counter(words, m) for m in ns if m >= n})
            break
        positions = candidates[candidates < len(words) - n + 1]
        keys = np.zeros(len(positions), dtype=np.uint64)
        for k in range(n):
            keys = keys * np.uint64(base) + ids[positions + k]
        maybe = maybe_repeated(keys)
        positions = positions[maybe]
        top, start = (1 if len(words) >= n else 0), 0
        if len(positions):
            unique = np.unique(keys[maybe], return_index=True, return_inverse=True, return_counts=True)
            _, first, inverse, counts = unique
            if counts.max() > 1:
                top = int(counts.max())
                start = int(positions[first[counts == top].min()])
            positions = positions[counts[inverse] > 1]
        if n in ns:
            out[n] = (sum(map(len, words[start : start + n])) + n - 1) * top
        candidates = positions
    return out


def _top_ngram_chars_counter(words: list[str], n: int) -> int:
    if len(words) < n:  # no n-gram
        return 0
    counts = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    gram, times = counts.most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * times


class JoinedGrams:
    """The word n-grams of a text as datatrove's ``find_all_duplicate`` sees them: the n words joined
    without separator, so different word splits of the same characters are the same gram.

    Every gram is a slice of the one joined string; a polynomial hash of its characters (prefix sums
    mod 2**64, so a gram's hash costs two array reads) groups equal grams without building them.
    """

    def __init__(self, words: list[str]):
        self.offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=len(words)), out=self.offsets[1:])
        self.chars = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        powers = np.full(len(self.chars) + 1, HASH_BASE, dtype=np.uint64)
        powers[0] = 1
        self.powers = np.cumprod(powers)  # HASH_BASE**i mod 2**64 (uint64 arithmetic wraps)
        inverse = np.full(len(self.chars) + 1, HASH_BASE_INVERSE, dtype=np.uint64)
        inverse[0] = 1
        self.prefix = np.zeros(len(self.chars) + 1, dtype=np.uint64)
        np.cumsum(self.chars * np.cumprod(inverse)[:-1], out=self.prefix[1:])  # sum of c_k * HASH_BASE**-k

    def hashes(self, n: int) -> np.ndarray:
        """Hash of each n-gram: sum of c_k * HASH_BASE**(k - start) over its characters."""
        starts, ends = self.offsets[:-n], self.offsets[n:]
        return (self.prefix[ends] - self.prefix[starts]) * self.powers[starts]

    def same_grams(self, a: np.ndarray, b: np.ndarray, n: int) -> bool:
        """Is the n-gram at each position of ``a`` the one at the same index of ``b`` (character by character)?"""
        starts_a, starts_b = self.offsets[a], self.offsets[b]
        lengths = self.offsets[a + n] - starts_a
        if not np.array_equal(lengths, self.offsets[b + n] - starts_b):
            return False
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return np.array_equal(
            self.chars[np.repeat(starts_a, lengths) + within], self.chars[np.repeat(starts_b, lengths) + within]
        )

    def later_occurrences(self, ns: tuple[int, ...]) -> dict[int, tuple[np.ndarray, np.ndarray] | None]:
        """For each n: the positions whose n-gram hash occurred before (ascending) and that first
        position of each, found for every n together (one bucket pass, one sort over what it leaves;
        each n's hashes are offset by ``n * N_TAG``). None for an n whose hash met another n's (the
        caller walks the strings)."""
        ns = tuple(n for n in ns if n <= len(self.offsets) - 1)
        out: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        if not ns:
            return out
        blocks = [self.hashes(n) + np.uint64(n * N_TAG % (1 << 64)) for n in ns]
        bounds = np.cumsum([0, *map(len, blocks)])
        keys = np.concatenate(blocks)
        maybe = maybe_repeated(keys)
        _, first, inverse = np.unique(keys[maybe], return_index=True, return_inverse=True)
        earliest = maybe[first[inverse]]  # the first index of each hash
        is_later = earliest != maybe
        later, heads = maybe[is_later], earliest[is_later]
        cuts = np.searchsorted(later, bounds)
        for k, n in enumerate(ns):
            block = slice(cuts[k], cuts[k + 1])
            positions, firsts = later[block] - bounds[k], heads[block] - bounds[k]
            out[n] = None if len(firsts) and firsts.min() < 0 else (positions, firsts)
        return out

    def duplicated_chars(self, ns: tuple[int, ...]) -> dict[int, int | None]:
        """datatrove's walk for each n: from position 0, a gram seen at a visited position adds its
        characters and jumps n positions, any other is remembered and the walk moves one on. The walk
        goes by hashes; the grams it took for equal are compared at the end: None when two differ (a
        hash collision: the caller walks the strings)."""
        found = self.later_occurrences(ns)
        out: dict[int, int | None] = {}
        for n in ns:
            if n not in found:  # fewer words than n
                out[n] = 0
            else:
                occurrences = found[n]
                out[n] = None if occurrences is None else self._walk(n, *occurrences)
        return out

    def _walk(self, n: int, later: np.ndarray, heads: np.ndarray) -> int | None:
        # only a later occurrence can repeat; the positions between two of them are first ones,
        # visited unless a jump skipped them. A repeat jumps to the first later occurrence past it.
        if not len(later):
            return 0
        jump = np.searchsorted(later, later + n).tolist()
        positions, firsts = later.tolist(), heads.tolist()
        revisited: set[int] = set()  # grams whose first position was skipped, visited later
        visited: list[int] = []  # indices into later/heads: the pairs the walk took for equal grams
        counted: list[int] = []  # ascending
        i = 0
        while i < len(positions):
            pos, head = positions[i], firsts[i]
            visited.append(i)
            before = bisect_left(counted, head)  # the head was skipped if a jump from a repeat spanned it
            if not before or head >= counted[before - 1] + n or head in revisited:
                counted.append(pos)
                i = jump[i]
            else:
                revisited.add(head)
                i += 1
        if not self.same_grams(later[visited], heads[visited], n):
            return None
        counted_at = np.array(counted, dtype=np.int64)
        return int((self.offsets[counted_at + n] - self.offsets[counted_at]).sum())


def duplicated_ngram_chars(words: list[str], ns: tuple[int, ...], grams: JoinedGrams | None = None) -> dict[int, int]:
    """For each n: characters in non-overlapping repeated n-grams (datatrove's ``find_all_duplicate``)."""
    found = (grams or JoinedGrams(words)).duplicated_chars(ns)
    return {n: _duplicated_ngram_chars_walk(words, n) if chars is None else chars for n, chars in found.items()}


def _duplicated_ngram_chars_walk(words: list[str], n: int) -> int:
    """datatrove's walk over the gram strings themselves (after a hash collision)."""
    n_words = len(words)
    unique: set[str] = set()
    repeated, idx = 0, 0
    while idx < n_words - n + 1:
        gram = "".join(words[idx : idx + n])
        if gram in unique:
            repeated += len(gram)
            idx += n
        else:
            unique.add(gram)
            idx += 1
    return repeated


def signals(text: str, words: list[str]) -> dict[str, float]:
    """The family's signals of a non-empty text (an empty one has none: its rule says ``empty``)."""
    if not text:
        return {}
    paragraphs = PARAGRAPH_SPLIT.split(text.strip())
    para_dups, para_chars = find_duplicates(paragraphs)
    lines = LINE_SPLIT.split(text)
    line_dups, line_chars = find_duplicates(lines)
    length = len(text)
    out = {
        "dup_para_frac": ratio(para_dups, len(paragraphs)),
        "dup_para_char_frac": ratio(para_chars, length),
        "dup_line_frac": ratio(line_dups, len(lines)),
        "dup_line_char_frac": ratio(line_chars, length),
    }
    for n, chars in top_ngrams_chars(words, TOP_N_GRAMS).items():
        out[f"top_{n}_gram"] = ratio(chars, length)
    for n, chars in duplicated_ngram_chars(words, DUP_N_GRAMS).items():
        out[f"duplicated_{n}_n_grams"] = ratio(chars, length)
    return out


@dataclass(frozen=True)
class GopherRepetitionRule(Rule):
    """Upper bounds on each repetition signal (fractions of lines, paragraphs or characters)."""

    max_dup_para_frac: float | None
    max_dup_para_char_frac: float | None
    max_dup_line_frac: float | None
    max_dup_line_char_frac: float | None
    max_top_2_gram: float | None
    max_top_3_gram: float | None
    max_top_4_gram: float | None
    max_duplicated_5_n_grams: float | None
    max_duplicated_6_n_grams: float | None
    max_duplicated_7_n_grams: float | None
    max_duplicated_8_n_grams: float | None
    max_duplicated_9_n_grams: float | None
    max_duplicated_10_n_grams: float | None

    FAMILY = FAMILY
    BOUNDS = (
        *(Bound(s, "max", s, zero_disables=True) for s in SIGNALS[:4]),  # datatrove: `if self.dup_... and`
        *(Bound(s, "max", s) for s in SIGNALS[4:]),
    )

    def check(self, signals: Signals) -> Verdict:
        if signals.get(column(FAMILY, "dup_para_frac")) is None:
            return False, "empty"
        return super().check(signals)
