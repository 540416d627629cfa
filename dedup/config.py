"""Dedup configuration: every knob that changes which documents count as duplicates lives here."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Literal

import xxhash

from common.cli import integer

# Bump when the meaning of signature/bucket/cluster files changes, so old files are refused.
FORMAT_VERSION = 1


@dataclass(frozen=True)
class DedupConfig:
    """MinHash-LSH parameters (FineWeb defaults) plus the URL and exact passes that may precede it.

    A pair of documents with shingle Jaccard ``s`` becomes a candidate with probability
    ``1 - (1 - s**hashes_per_bucket) ** num_buckets`` (0.92 at s = 0.8 with 14 x 8).
    """

    n_grams: int = 5
    num_buckets: int = 14
    hashes_per_bucket: int = 8
    hash_bits: Literal[32, 64] = 64
    seed: int = 1
    exact_dedup: bool = False
    # "raw": byte-identical texts; "simplified": equal after simplify_text (case, digits, punctuation)
    exact_text: Literal["raw", "simplified"] = "raw"
    # one capture per normalised URL, the newest (datatrove's URL dedup with the date as priority)
    url_dedup: bool = False
    # index folders (RUN/minhash/index) of earlier dumps: drop documents with a band in any of them
    dedup_against: tuple[str, ...] = ()
    # "spacy": datatrove's spaCy English word tokens, reproduced exactly by a memoised fast path;
    # "whitespace": simplify_text(...).split(), no spaCy needed.
    word_split: Literal["spacy", "whitespace"] = "spacy"
    # "text": xxh64 of the space-joined n-gram, bit-identical to datatrove's MinhashDedupSignature;
    # "words": xxh64 per word, n consecutive word hashes combined in numpy (~7% faster overall).
    # Both hash the same shingle sets (up to 64-bit collisions), so detection is the same.
    shingle_hash: Literal["text", "words"] = "text"
    # Metadata column whose value separates dedup groups (FineWeb dedups each dump on its own);
    # documents in different groups are never duplicates. None: one group.
    group_by: str | None = "dump"
    batch_docs: int = 512
    sort_buffer_records: int = 1 << 19
    # Clustering: None = one union-find task while its estimated memory fits cluster_memory_mb, else
    # large-star / small-star passes over partitioned edge files (dedup/star.py); 1 = always the single
    # task; N > 1 = N tasks per pass. cluster_memory_mb caps each pass task (it sizes the sort buffer).
    cluster_tasks: int | None = None
    cluster_memory_mb: int = 4096
    # near-duplicate method after the URL / exact passes: "minhash" (FineWeb's LSH, above) or "bff"
    # (DCLM's Bloom filter over word n-grams, paragraph and document level: dedup/bff.py)
    method: Literal["minhash", "bff"] = "minhash"
    bff_max_ngram: int = 13  # DCLM: --min-ngram-size 13 --max-ngram-size 13 --filtering-threshold 0.8
    bff_min_ngram: int = 13
    bff_threshold: float = 0.8
    bff_fp_rate: float = 0.01  # DCLM: --fp-rate 0.01 (per n-gram)
    # None: estimated from the input's text bytes (one n-gram per 4 bytes: an overestimate, as DCLM advises)
    bff_expected_ngrams: int | None = None
    # a single-task pass: save the filter after an input file when this many seconds passed since the last save
    bff_checkpoint_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.n_grams < 1 or self.num_buckets < 1 or self.hashes_per_bucket < 1:
            raise ValueError(f"n_grams, num_buckets and hashes_per_bucket must be >= 1: {self}")
        if not 0 <= self.seed < 2**32:  # numpy's generator takes no other seed, and said so in a traceback
            raise ValueError(f"seed must be in 0 .. 2**32 - 1, got {self.seed}")
        if self.hash_bits not in (32, 64):
            raise ValueError(f"hash_bits must be 32 or 64, got {self.hash_bits}")
        if self.cluster_tasks is not None and self.cluster_tasks < 1:
            raise ValueError(f"cluster_tasks must be >= 1 (or None for automatic), got {self.cluster_tasks}")
        if self.exact_text not in ("raw", "simplified"):
            raise ValueError(f"exact_text must be 'raw' or 'simplified', got {self.exact_text!r}")
        if self.method not in ("minhash", "bff"):
            raise ValueError(f"method must be 'minhash' or 'bff', got {self.method!r}")
        if not 1 <= self.bff_min_ngram <= self.bff_max_ngram:
            raise ValueError(f"BFF needs 1 <= min n-gram <= max n-gram, got {self.bff_min_ngram}, {self.bff_max_ngram}")
        if not 0.0 <= self.bff_threshold < 1.0 or not 0.0 < self.bff_fp_rate < 1.0:
            raise ValueError(
                f"BFF needs 0 <= threshold < 1 and 0 < fp rate < 1: {self.bff_threshold}, {self.bff_fp_rate}"
            )
        if self.bff_expected_ngrams is not None:  # .nan or .inf broke the filter's sizing; 2**63 sized it in EB
            BFF_EXPECTED_NGRAMS.check(self.bff_expected_ngrams, "bff_expected_ngrams (or null: estimated)")
        if self.method == "bff" and (self.dedup_against or self.cluster_tasks is not None):
            raise ValueError("dedup_against and cluster_tasks are MinHash options; method 'bff' takes neither")

    @property
    def num_hashes(self) -> int:
        return self.num_buckets * self.hashes_per_bucket

    def signature_spec(self) -> dict:
        """The fields that decide band keys: files written under another spec are foreign."""
        spec = asdict(self)
        for key in (
            "exact_dedup",
            "exact_text",
            "url_dedup",
            "dedup_against",
            "batch_docs",
            "sort_buffer_records",
            "cluster_tasks",
            "cluster_memory_mb",
            "method",
            *(k for k in spec if k.startswith("bff_")),
        ):
            spec.pop(key)
        spec["format"] = FORMAT_VERSION
        return spec

    def fingerprint(self, kind: str) -> int:
        """64-bit id of (kind, signature spec); stored in every file header."""
        minhash_based = kind in ("minhash", "cross_dump")
        spec = {"kind": kind, **(self.signature_spec() if minhash_based else {"format": FORMAT_VERSION})}
        if kind == "cross_dump":
            spec["against"] = list(self.dedup_against)
        if kind in ("exact", "url"):
            spec["group_by"] = self.group_by
        if kind == "exact" and self.exact_text != "raw":  # raw keeps the fingerprint of earlier files
            spec["exact_text"] = self.exact_text
        if kind == "bff":
            spec |= {k: v for k, v in asdict(self).items() if k.startswith("bff_") and k != "bff_checkpoint_seconds"}
            spec["group_by"] = self.group_by
        return xxhash.xxh64_intdigest(json.dumps(spec, sort_keys=True))


# n-grams a Bloom filter is sized for: at DCLM's fp rate (9.6 bits each) 2**44 take a 20 TB filter, beyond any
# one machine's memory (the filter is held whole by one task).
BFF_EXPECTED_NGRAMS = integer(1, 1 << 44)


@dataclass(frozen=True)
class DedupSection:
    """The recipe's ``dedup`` section: whether the stages run, which passes precede the near-duplicate
    method (FineWeb's MinHash or DCLM's BFF), and whether this dump's index is kept for later dumps.
    MinHash's and BFF's other parameters stay FineWeb's and DCLM's (``DedupConfig``)."""

    enabled: bool
    url_dedup: bool
    exact_dedup: bool
    exact_text: str
    write_index: bool
    method: str = "minhash"  # "bff": DCLM's Bloom filter (paragraph and document level) instead of MinHash
    bff_fp_rate: float = 0.01
    bff_expected_ngrams: int | None = None  # None: estimated from the input's text bytes

    def config(self, dedup_against: tuple[str, ...] = ()) -> DedupConfig:
        """The dedup configuration; ``dedup_against``: earlier dumps' index folders. ValueError if invalid."""
        return replace(
            DedupConfig(),
            url_dedup=self.url_dedup,
            exact_dedup=self.exact_dedup,
            exact_text=self.exact_text,  # type: ignore[arg-type]  # checked by DedupConfig.__post_init__
            dedup_against=dedup_against,
            method=self.method,  # type: ignore[arg-type]  # checked by DedupConfig.__post_init__
            bff_fp_rate=self.bff_fp_rate,
            bff_expected_ngrams=self.bff_expected_ngrams,
        )
