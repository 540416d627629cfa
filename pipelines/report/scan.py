"""One streaming pass over a document set: tokens, lengths, languages, domains, scores, samples.

A dump's parquet files do not fit in memory, so they are read in record batches, reduced to
fixed-bin histograms and counters, and sampled with a seeded reservoir (the same run gives the same
report). Only quality scores are kept whole (4 bytes a document, when a classifier ran), since their
range is not known in advance. Tokens are approximated as whitespace-separated words, as
``str.split()`` counts them.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from common.documents import open_parquet
from common.run_dir import CURATED, PREVIOUS_REASON, PREVIOUSLY
from common.storage import is_remote
from common.transfer import FetchAhead
from pipelines.report.data import DocSet, reason_kind

TOKEN_NOTE = "tokens ≈ whitespace-separated words of the stored text"
# a word as Python's str.split() sees it: RE2's \s is ASCII-only, so Unicode spaces are added
WORD = r"[^\s\x0b\x1c-\x1f\x85\p{Z}]+"
# word-count bins: 0, then log-spaced edges 1 .. 10^7 (a page beyond that is not a document)
LENGTH_EDGES = np.concatenate([[0.0], np.logspace(0, 7, 71)])
TEXT_CHARS = 1500  # characters of a sampled document kept for display

FOOTER_READS = 8  # parquet footers of a store read at once (count_rows)


def domain(url: str | None) -> str:
    """Host name without a leading ``www.`` (what a curator recognizes), or ``(none)``."""
    if not url:
        return "(none)"
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return "(invalid)"
    return host.removeprefix("www.") or "(none)"


def count_rows(files: list[Path]) -> int:
    """Documents in parquet files, from their footers (for a progress bar's total); on a store the footers
    are read together (a HEAD and a GET each, one file after another, were 0.6 s of the sample's report at a
    store 30 ms away, ``bench.object_store --latency-ms 30``)."""
    if not files or not is_remote(files[0]):
        return sum(open_parquet(f).metadata.num_rows for f in files)
    with ThreadPoolExecutor(FOOTER_READS) as pool:
        return sum(pool.map(lambda f: open_parquet(f).metadata.num_rows, files))


def word_counts(text: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Whitespace-separated words per document (0 for empty or missing text)."""
    counts = pc.count_substring_regex(text, pattern=WORD)
    return np.asarray(pc.fill_null(counts, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def iter_batches(
    files: list[Path], batch_size: int = 2048, ahead: FetchAhead | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of every file, all columns (each file has its own: older runs lack some), in order;
    a file ``ahead`` fetched is read from its local copy, deleted once read."""
    for path in files:
        local = ahead.take(path) if ahead is not None else None
        if local is None:
            yield from open_parquet(path).iter_batches(batch_size=batch_size)
            continue
        try:
            yield from pq.ParquetFile(local).iter_batches(batch_size=batch_size)
        finally:
            local.unlink(missing_ok=True)


@dataclass
class Reservoir:
    """Algorithm R: a uniform sample of ``k`` items from a stream of unknown length."""

    k: int
    rng: random.Random
    seen: int = 0
    items: list[dict] = field(default_factory=list)

    def slot(self) -> int | None:
        """Where the next stream item goes (None: not sampled); call once per item."""
        self.seen += 1
        if len(self.items) < self.k:
            self.items.append({})
            return len(self.items) - 1
        j = self.rng.randrange(self.seen)
        return j if j < self.k else None


@dataclass
class Profile:
    """Everything the report plots about one document set."""

    key: str
    docs: int = 0
    tokens: int = 0
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(len(LENGTH_EDGES) - 1, dtype=np.int64))
    languages: Counter = field(default_factory=Counter)
    domains: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    cluster_sizes: Counter = field(default_factory=Counter)
    scores: list[np.ndarray] = field(default_factory=list)
    samples: dict[str, Reservoir] = field(default_factory=dict)

    @property
    def quality_scores(self) -> np.ndarray:
        return np.concatenate(self.scores) if self.scores else np.zeros(0)


def _row_sample(batch: pa.RecordBatch, i: int, words: int, reason: str | None) -> dict:
    row = batch.slice(i, 1).to_pylist()[0]
    text = row.get("text") or ""
    return {
        "url": row.get("url"),
        "reason": reason,
        "language": row.get("language"),
        "language_score": row.get("language_score"),
        "words": int(words),
        "cluster_size": row.get("minhash_cluster_size"),
        "text": text[:TEXT_CHARS],
        "truncated": len(text) > TEXT_CHARS,
        "signals": {k: v for k, v in row.items() if isinstance(v, float) and not math.isnan(v)},
        "previously": previously(row),
    }


def previously(row: dict) -> str | None:
    """Where a refilter output's document was in its run, and why (None outside a refilter output)."""
    was = row.get(PREVIOUSLY)
    if was is None:
        return None
    return "kept" if was == CURATED else f"removed/{was} · {row.get(PREVIOUS_REASON) or '(none)'}"


def first_rows(docsets: list[DocSet], keep: Callable[[dict], bool], k: int) -> list[dict]:
    """The first ``k`` documents of ``docsets`` that ``keep`` accepts (it sees the refilter's columns), as samples."""
    found: list[dict] = []
    for docset in docsets:
        for batch in iter_batches(docset.files):
            columns = [c for c in (PREVIOUSLY, PREVIOUS_REASON) if c in batch.schema.names]
            for i, row in enumerate(batch.select(columns).to_pylist()):
                if keep(row):
                    one = batch.slice(i, 1)
                    words = int(word_counts(one.column("text"))[0])
                    reason = one.column("filter_reason")[0].as_py() if "filter_reason" in one.schema.names else None
                    found.append(_row_sample(one, 0, words, reason or docset.default_reason or "kept"))
                    if len(found) == k:
                        return found
    return found


def _sample(profile: Profile, batch: pa.RecordBatch, words: np.ndarray, reasons: list[str], k: int, seed: int) -> None:
    """``k`` samples per kind of reason (``reason_kind``); a sample shows its whole reason."""
    for i, reason in enumerate(reasons):
        kind = reason_kind(reason)
        res = profile.samples.get(kind)
        if res is None:
            res = profile.samples[kind] = Reservoir(k, random.Random(f"{seed}:{profile.key}:{kind}"))
        slot = res.slot()
        if slot is not None:  # rare after the first k: materialize just this row, hold no batch
            res.items[slot] = _row_sample(batch, i, int(words[i]), reason)


def scan(
    docset: DocSet,
    samples_per_reason: int = 3,
    seed: int = 0,
    bar: tqdm | None = None,
    ahead: FetchAhead | None = None,
) -> Profile:
    """Reduce one document set to a ``Profile`` in a single pass (``bar`` counts documents; ``ahead``: its
    files on a store, fetched ahead in the order read)."""
    profile = Profile(docset.key)
    for batch in iter_batches(docset.files, ahead=ahead):  # all columns: the text dominates anyway
        if bar is not None:
            bar.update(batch.num_rows)
        names = batch.schema.names
        words = word_counts(batch.column("text")) if "text" in names else np.zeros(batch.num_rows, np.int64)
        profile.docs += batch.num_rows
        profile.tokens += int(words.sum())
        profile.lengths += np.histogram(np.minimum(words, LENGTH_EDGES[-1]), bins=LENGTH_EDGES)[0]
        if "language" in names:
            profile.languages.update(x for x in batch.column("language").to_pylist() if x)
        if "url" in names:
            profile.domains.update(domain(u) for u in batch.column("url").to_pylist())
        raw = batch.column("filter_reason").to_pylist() if "filter_reason" in names else [None] * batch.num_rows
        fallback = "kept" if docset.key == "kept" else docset.default_reason or "(none)"
        reasons = [r or fallback for r in raw]
        if docset.key != "kept":
            profile.reasons.update(map(reason_kind, reasons))
        if "quality_score" in names:
            scores = batch.column("quality_score").drop_null().to_numpy(zero_copy_only=False)
            if len(scores):
                profile.scores.append(scores.astype(np.float32))
        if "minhash_cluster_size" in names and docset.key == "kept":
            profile.cluster_sizes.update(int(x) for x in batch.column("minhash_cluster_size").drop_null().to_pylist())
        _sample(profile, batch, words, reasons, samples_per_reason, seed)
    return profile
