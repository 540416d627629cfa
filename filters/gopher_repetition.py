"""Gopher repetition (Rae et al. 2021, Table A1): how much of a page is repeated lines, paragraphs, n-grams.

Definitions are datatrove's ``GopherRepetitionFilter`` exactly (its helpers are reproduced here over
our one tokenization); the signal names are datatrove's reasons, so ``dup_line_frac`` is the recipe's
``max_dup_line_frac``, the column ``gopher_repetition_dup_line_frac`` and the reason ``dup_line_frac``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from filters.rule import Bound, Rule, Signals, Verdict, column, ratio

FAMILY = "gopher_repetition"
TOP_N_GRAMS = (2, 3, 4)  # datatrove's default n of top_n_grams / dup_n_grams: the signals a run stores
DUP_N_GRAMS = (5, 6, 7, 8, 9, 10)
HASH_BASE = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64
HASH_BASE_INVERSE = pow(HASH_BASE, -1, 1 << 64)
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
    rank = {word: i for i, word in enumerate(dict.fromkeys(words))}
    return np.fromiter(map(rank.__getitem__, words), dtype=np.uint64, count=len(words))


def top_ngrams_chars(words: list[str], ns: tuple[int, ...] = TOP_N_GRAMS) -> dict[int, int]:
    """For each n of ``ns``: characters covered by the most frequent word n-gram (datatrove's
    ``find_top_duplicate`` over space-joined n-grams, whose words hold no space; first seen wins ties,
    as ``most_common``), times its count.

    Each n-gram is a number (its word ids in base ``distinct words``), counted by one ``np.unique``.
    n runs up from the smallest of ``ns``, and only positions whose (n-1)-gram occurs twice or more
    are counted for n: elsewhere the n-gram is unique too. On prose that leaves few positions past n=2."""
    out: dict[int, int] = {}
    if not ns:
        return out
    ids = word_ids(words)
    base = int(ids.max()) + 1 if len(ids) else 1
    candidates = np.arange(len(words))  # positions whose (n-1)-gram repeats (all of them for the first n)
    for n in range(min(ns), max(ns) + 1):
        positions = candidates[candidates < len(words) - n + 1]
        if len(words) < n:
            top, start = 0, 0
        elif base**n >= 1 << 64:  # too many distinct words for one 64-bit key
            out.update({m: _top_ngram_chars_counter(words, m) for m in ns if m >= n})
            break
        elif len(positions) < 2:  # every n-gram is unique: the first one wins
            top, start, positions = 1, 0, positions[:0]
        else:
            keys = np.zeros(len(positions), dtype=np.uint64)
            for k in range(n):
                keys = keys * np.uint64(base) + ids[positions + k]
            _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
            top = int(counts.max())
            start = int(positions[first[counts == top].min()]) if top > 1 else 0
            positions = positions[counts[inverse] > 1]
        if n in ns:
            out[n] = (sum(map(len, words[start : start + n])) + n - 1) * top
        candidates = positions
    return out


def _top_ngram_chars_counter(words: list[str], n: int) -> int:
    counts = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    gram, count = counts.most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * count


class JoinedGrams:
    """The word n-grams of a text as datatrove's ``find_all_duplicate`` sees them: the n words joined
    without separator, so different word splits of the same characters are the same gram.

    Every gram is a slice of the one joined string; a polynomial hash of its characters (prefix sums
    mod 2**64, so a gram's hash costs two array reads) groups equal grams without building them.
    """

    def __init__(self, words: list[str]):
        self.joined = "".join(words)
        self.offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=len(words)), out=self.offsets[1:])
        chars = np.frombuffer(self.joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
        powers = np.full(len(chars) + 1, HASH_BASE, dtype=np.uint64)
        powers[0] = 1
        self.powers = np.cumprod(powers)  # HASH_BASE**i mod 2**64 (uint64 arithmetic wraps)
        inverse = np.full(len(chars) + 1, HASH_BASE_INVERSE, dtype=np.uint64)
        inverse[0] = 1
        self.prefix = np.zeros(len(chars) + 1, dtype=np.uint64)
        np.cumsum(chars * np.cumprod(inverse)[:-1], out=self.prefix[1:])  # sum of c_k * HASH_BASE**-k

    def gram(self, start: int, n: int) -> str:
        return self.joined[self.offsets[start] : self.offsets[start + n]]

    def hashes(self, n: int) -> np.ndarray:
        """Hash of each n-gram: sum of c_k * HASH_BASE**(k - start) over its characters."""
        starts, ends = self.offsets[:-n], self.offsets[n:]
        return (self.prefix[ends] - self.prefix[starts]) * self.powers[starts]

    def duplicated_chars(self, n: int) -> int | None:
        """datatrove's walk: from position 0, a gram seen at a visited position adds its characters
        and jumps n positions, any other is remembered and the walk moves one on. None when two
        different grams share a hash (the caller walks the strings)."""
        if len(self.offsets) - 1 < n:
            return 0
        _, first, inverse = np.unique(self.hashes(n), return_index=True, return_inverse=True)
        earliest = first[inverse]  # the first position of each gram's hash
        later = np.flatnonzero(earliest != np.arange(len(earliest)))
        if not len(later):
            return 0
        # only a later occurrence can repeat; the positions between two of them are first ones,
        # visited unless a jump skipped them
        skipped: set[int] = set()
        revisited: set[int] = set()  # grams whose first position was skipped, visited later
        repeated = idx = 0
        for pos, head in zip(later.tolist(), earliest[later].tolist(), strict=True):
            if pos < idx:
                continue
            gram = self.gram(pos, n)
            if gram != self.gram(head, n):
                return None
            if head not in skipped or head in revisited:
                repeated += len(gram)
                skipped.update(range(pos + 1, pos + n))
                idx = pos + n
            else:
                revisited.add(head)
                idx = pos + 1
        return repeated


def duplicated_ngram_chars(words: list[str], n: int, grams: JoinedGrams | None = None) -> int:
    """Characters in non-overlapping repeated n-grams (datatrove's ``find_all_duplicate``)."""
    found = (grams or JoinedGrams(words)).duplicated_chars(n)
    return _duplicated_ngram_chars_walk(words, n) if found is None else found


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
    grams = JoinedGrams(words)
    for n in DUP_N_GRAMS:
        out[f"duplicated_{n}_n_grams"] = ratio(duplicated_ngram_chars(words, n, grams), length)
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
