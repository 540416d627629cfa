"""fastText's input rows of words (word id + character n-gram buckets), vectorized over many words.

Per word, fastText (``Dictionary::computeSubwords``) hashes every n-gram of ``<word>`` of ``minn`` to
``maxn`` UTF-8 characters with 32-bit FNV-1a (bytes sign-extended, as C++ ``int8_t``), takes it
modulo ``bucket`` and, in a quantized model, keeps only the buckets in the prune index. Doing that in
Python per word costs ~30 µs; here one numpy pass handles all new words of a batch at once.
"""

from __future__ import annotations

from itertools import compress, repeat

import numpy as np

from classifiers.ft_format import FastTextFile

FNV_OFFSET = np.uint32(2166136261)
FNV_PRIME = np.uint32(16777619)
EOS = "</s>"
SEPARATOR = 0x20  # never inside a token: fastText splits on it
_EMPTY = (np.empty(0, np.int64), np.empty(0, np.uint32))


def _sign_extended(byte: np.ndarray) -> np.ndarray:
    b = byte.astype(np.uint32)
    return np.where(b >= 128, b | np.uint32(0xFFFFFF00), b)


def ngram_hashes(words: list[str], minn: int, maxn: int) -> tuple[np.ndarray, np.ndarray]:
    """(word index, FNV-1a hash) of every character n-gram of ``<word>``.

    ASCII words (most of them, in most languages' web text) take a path with no gathers: an n-gram
    is n bytes, so every start position advances together on shifted views of the byte string.
    """
    if maxn <= 0 or not words:
        return _EMPTY
    ascii_words = np.fromiter(map(str.isascii, words), dtype=bool, count=len(words))
    if ascii_words.all():
        return _ascii_ngram_hashes(words, minn, maxn)
    if not ascii_words.any():
        return _utf8_ngram_hashes(words, minn, maxn)
    parts = []
    for mask, fn in ((ascii_words, _ascii_ngram_hashes), (~ascii_words, _utf8_ngram_hashes)):
        widx, hashes = fn(list(compress(words, mask.tolist())), minn, maxn)
        parts.append((np.flatnonzero(mask)[widx], hashes))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _ascii_ngram_hashes(words: list[str], minn: int, maxn: int) -> tuple[np.ndarray, np.ndarray]:
    """``ngram_hashes`` for words of ASCII characters only (one byte per character)."""
    data = np.frombuffer(("<" + "> <".join(words) + "> ").encode("ascii"), dtype=np.uint8)
    is_sep = data == SEPARATOR
    word_of_byte = np.cumsum(is_sep) - is_sep
    seps_before = np.concatenate(([0], np.cumsum(is_sep)))  # separators in data[:i]
    bow = np.concatenate(([True], is_sep[:-1]))  # the '<' that opens a word
    wide = data.astype(np.uint32)
    h = np.full(len(data), FNV_OFFSET, dtype=np.uint32)
    word_idx, hashes = [], []
    for n in range(1, maxn + 1):
        size = len(data) - n + 1  # n-grams starting at 0 .. size-1
        if size <= 0:
            break
        h = (h[:size] ^ wide[n - 1 :]) * FNV_PRIME
        if n < minn:
            continue
        keep = seps_before[n : n + size] == seps_before[:size]  # no separator inside the n-gram
        if n == 1:  # a lone '<' or '>' is no n-gram
            keep &= ~bow[:size] & ~np.append(is_sep[1:], True)[:size]
        start = np.flatnonzero(keep)
        word_idx.append(word_of_byte[start])
        hashes.append(h[start])
    if not hashes:
        return _EMPTY
    return np.concatenate(word_idx).astype(np.int64), np.concatenate(hashes)


def _utf8_ngram_hashes(words: list[str], minn: int, maxn: int) -> tuple[np.ndarray, np.ndarray]:
    """``ngram_hashes`` for any words: n-grams of UTF-8 characters, hashed byte by byte."""
    blob = ("<" + "> <".join(words) + "> ").encode("utf-8", "surrogatepass")
    data = np.frombuffer(blob, dtype=np.uint8)
    ascii_only = bool(data.max() < 0x80)
    starts = np.arange(len(data)) if ascii_only else np.flatnonzero((data & 0xC0) != 0x80)
    is_sep = data[starts] == SEPARATOR
    word_of_char = np.cumsum(is_sep) - is_sep  # word index of each character
    char_len = np.diff(np.append(starts, len(data)))
    sext = data.astype(np.uint32) if ascii_only else _sign_extended(data)
    # one cursor per n-gram start (every character of every word), compacted as n-grams end
    begin = np.flatnonzero(~is_sep)
    stop = np.flatnonzero(is_sep)[word_of_char[begin]]  # character index of the word's separator
    first = np.concatenate(([True], is_sep[:-1]))[begin]  # starts at the '<' (BOW)
    h = np.full(len(begin), FNV_OFFSET, dtype=np.uint32)
    word_idx, hashes = [], []
    for n in range(1, maxn + 1):
        char = begin + (n - 1)
        alive = char < stop
        if not alive.all():
            begin, stop, first, h, char = begin[alive], stop[alive], first[alive], h[alive], char[alive]
        if not len(begin):
            break
        lo = starts[char]
        h = (h ^ sext[lo]) * FNV_PRIME
        if not ascii_only:
            length = char_len[char]
            for k in range(1, 4):  # continuation bytes of multi-byte characters
                more = np.flatnonzero(length > k)
                if not len(more):
                    break
                h[more] = (h[more] ^ sext[lo[more] + k]) * FNV_PRIME
        if n >= minn:
            if n == 1:  # a lone '<' or '>' is no n-gram
                keep = ~(first | (char + 1 == stop))
                word_idx.append(word_of_char[begin[keep]])
                hashes.append(h[keep])
            else:
                word_idx.append(word_of_char[begin])
                hashes.append(h.copy())
    if not hashes:
        return _EMPTY
    return np.concatenate(word_idx).astype(np.int64), np.concatenate(hashes)


def subword_rows(model: FastTextFile, words: list[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(word index, input row) pairs: the word's own row when in the vocabulary, then its n-grams."""
    args = model.args
    ids = np.fromiter(map(vocab.get, words, repeat(-1)), dtype=np.int64, count=len(words))
    known = np.flatnonzero(ids >= 0)
    widx, h = ngram_hashes(words, args.minn, args.maxn)
    if EOS in words:  # fastText adds no n-grams to EOS
        keep = widx != words.index(EOS)
        widx, h = widx[keep], h[keep]
    bucket_ids = (h % np.uint32(max(args.bucket, 1))).astype(np.int64)
    if model.prune_size >= 0:  # quantized: only buckets in the prune index survive, renumbered
        offsets = model.bucket_offsets()[bucket_ids]
        found = offsets >= 0
        widx, bucket_ids = widx[found], offsets[found]
    rows = model.nwords + bucket_ids
    return np.concatenate([known, widx]), np.concatenate([ids[known], rows])
