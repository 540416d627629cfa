"""Bucket keys per document: LSH band keys for MinHash, a content hash for exact dedup, a URL key.

A keyer turns a batch of documents into ``(keys, positions)``: ``keys`` is (m, n_bands) uint64 for
the m documents of the batch that get keys, ``positions`` their indices in the batch. Documents
that share a key in any band are candidate duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash
from datatrove.data import Document

from dedup.config import DedupConfig
from dedup.minhash import MinHasher, band_keys, fmix64
from dedup.shingles import batch_shingles
from dedup.text import make_splitter, normalized_words
from dedup.urlnorm import URL_BANDS, capture_time, normalize_url


def group_salts(docs: Sequence[Document], group_by: str | None) -> np.ndarray | None:
    """One salt per document from its group column (e.g. the dump), None when not grouping."""
    if group_by is None:
        return None
    values = [d.metadata.get(group_by) for d in docs]
    return np.fromiter(
        (0 if v is None else xxhash.xxh64_intdigest(str(v)) for v in values), dtype=np.uint64, count=len(docs)
    )


class MinhashKeyer:
    """Shingles -> 112 MinHash values -> 14 band keys, per batch of documents."""

    kind = "minhash"

    def __init__(self, config: DedupConfig) -> None:
        self.config = config
        self.n_bands = config.num_buckets
        self.split = make_splitter(config.word_split)
        self.hasher = MinHasher(config.num_hashes, config.seed, config.hash_bits)

    def shingles(self, text: str) -> np.ndarray:
        """The shingle hashes of one text (what its signature summarises)."""
        return batch_shingles([self.split(text)], self.config.n_grams, self.config.shingle_hash)[0]

    def signatures(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures of the texts that have words, their positions)."""
        words = [self.split(t) for t in texts]
        flat, offsets, positions = batch_shingles(words, self.config.n_grams, self.config.shingle_hash)
        return self.hasher.signatures(flat, offsets), positions

    def __call__(self, docs: Sequence[Document]) -> tuple[np.ndarray, np.ndarray]:
        sigs, positions = self.signatures([d.text for d in docs])
        salts = group_salts([docs[i] for i in positions], self.config.group_by)
        keys = band_keys(sigs, self.config.num_buckets, self.config.hashes_per_bucket, salts)
        return keys, positions


class ExactKeyer:
    """xxh3-64 of the text: a cheap first pass that removes identical documents. ``exact_text``:
    "raw" (byte-identical) or "simplified" (equal after ``simplify_text``: case, digits,
    punctuation and spacing differences are ignored, as MinHash's shingles ignore them)."""

    kind = "exact"
    n_bands = 1

    def __init__(self, config: DedupConfig) -> None:
        self.config = config

    def _text(self, text: str) -> str | bytes:
        if self.config.exact_text == "raw":
            return text
        words = normalized_words(text)
        return b" ".join(words) if words and isinstance(words[0], bytes) else " ".join(words)

    def __call__(self, docs: Sequence[Document]) -> tuple[np.ndarray, np.ndarray]:
        h = np.fromiter((xxhash.xxh3_64_intdigest(self._text(d.text)) for d in docs), dtype=np.uint64, count=len(docs))
        salts = group_salts(docs, self.config.group_by)
        if salts is not None:
            h = h ^ salts
        return fmix64(h)[:, None], np.arange(len(docs))


class UrlKeyer:
    """(URL key, capture time) per document; a document without a URL gets no key (never a duplicate)."""

    kind = "url"
    n_bands = URL_BANDS

    def __init__(self, config: DedupConfig) -> None:
        self.config = config

    def __call__(self, docs: Sequence[Document]) -> tuple[np.ndarray, np.ndarray]:
        positions = np.array([i for i, d in enumerate(docs) if d.metadata.get("url")], dtype=np.int64)
        chosen = [docs[i] for i in positions]
        keys = np.empty((len(chosen), URL_BANDS), dtype=np.uint64)
        keys[:, 0] = np.fromiter(
            (xxhash.xxh3_64_intdigest(normalize_url(str(d.metadata["url"]))) for d in chosen),
            dtype=np.uint64,
            count=len(chosen),
        )
        salts = group_salts(chosen, self.config.group_by)
        if salts is not None:
            keys[:, 0] = fmix64(keys[:, 0] ^ salts)
        keys[:, 1] = np.fromiter((capture_time(d.metadata.get("date")) for d in chosen), np.uint64, len(chosen))
        return keys, positions


KEYERS = {"minhash": MinhashKeyer, "exact": ExactKeyer, "url": UrlKeyer}


def make_keyer(config: DedupConfig, kind: str) -> MinhashKeyer | ExactKeyer | UrlKeyer:
    if kind not in KEYERS:
        raise ValueError(f"unknown dedup kind {kind!r}")
    return KEYERS[kind](config)


def n_bands(config: DedupConfig, kind: str) -> int:
    return config.num_buckets if kind == "minhash" else KEYERS[kind].n_bands
