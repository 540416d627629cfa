"""Measuring dedup quality: exact shingle Jaccard, near-duplicates with a controlled edit rate,
the LSH detection curve, and a real-text corpus for tests and benchmarks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datatrove.io import get_datafolder

from dedup.config import DedupConfig
from dedup.formats import SIG_KIND, SIGNATURE, signature_path
from dedup.records import Header, RecordWriter


def lsh_probability(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Chance that a pair with Jaccard s shares at least one of ``bands`` bands of ``rows`` hashes."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two shingle-hash sets (arrays may hold repeats)."""
    a, b = np.unique(a), np.unique(b)
    inter = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - inter
    return inter / union if union else 1.0


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """MinHash estimate: the fraction of hash functions whose minima agree."""
    return float(np.mean(sig_a == sig_b))


def edit_words(words: Sequence[str], edits: int, rng: random.Random, vocabulary: Sequence[str]) -> list[str]:
    """Apply ``edits`` random word edits (substitute, delete or insert a vocabulary word)."""
    out = list(words)
    for _ in range(edits):
        op = rng.random()
        i = rng.randrange(len(out)) if out else 0
        if op < 0.6 and out:
            out[i] = rng.choice(vocabulary)
        elif op < 0.8 and len(out) > 1:
            del out[i]
        else:
            out.insert(i, rng.choice(vocabulary))
    return out


def near_duplicate(
    words: Sequence[str],
    target: float,
    shingles: Callable[[str], np.ndarray],
    rng: random.Random,
    vocabulary: Sequence[str],
    n_grams: int = 5,
    base: np.ndarray | None = None,
) -> tuple[str, float]:
    """A variant of ``words`` with exact Jaccard close to ``target`` and its Jaccard.

    The edit count comes from the expected share of n-grams an edit destroys, then one secant
    step corrects it against the measured Jaccard; the closer of the two variants is returned.
    ``base``: the shingles of ``words``, when the caller already has them.
    """
    base = np.unique(shingles(" ".join(words)) if base is None else base)
    seed = rng.random()
    n = max(1, len(words))

    def variant(k: int) -> tuple[str, float]:
        text = " ".join(edit_words(words, k, random.Random(seed), vocabulary))
        return text, jaccard(base, shingles(text))

    def edits_for(j: float) -> float:
        kept = 2 * j / (1 + j)  # share of n-grams surviving when J = kept / (2 - kept)
        return n * (1 - kept ** (1 / n_grams))

    k0 = max(1, round(edits_for(target)))
    first = variant(k0)
    if first[1] >= 1.0 or first[1] <= 0.0:
        return first
    k1 = max(1, round(k0 * edits_for(target) / max(edits_for(first[1]), 1e-9)))
    second = variant(k1) if k1 != k0 else first
    return min(first, second, key=lambda v: abs(v[1] - target))


def _jsonl(path: Path) -> Iterable[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def real_texts(data_dir: Path) -> list[str]:
    """Real article/web texts from ``shared/data``: extraction ground truths, WikiText articles
    (detokenised), Common Crawl samples and the plagiarism corpus."""
    texts: list[str] = []
    for gt in sorted(data_dir.glob("html_extraction_*/ground_truth.jsonl")):
        texts += [r["text"] for r in _jsonl(gt) if (r.get("text") or "").strip()]
    wiki = data_dir / "wikitext2_articles" / "articles_valid.jsonl"
    if wiki.exists():
        for r in _jsonl(wiki):
            t = r["text"].replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
            texts.append(t)
    for name in ("cc_web_text_samples/docs.jsonl", "neardup_plagiarised_short_answers/docs.jsonl"):
        if (data_dir / name).exists():
            texts += [r["text"] for r in _jsonl(data_dir / name) if r.get("text")]
    return texts


def paragraph_chunks(texts: Iterable[str], target_words: int = 300) -> list[str]:
    """Split long texts at paragraph breaks into documents of about ``target_words`` words."""
    docs: list[str] = []
    for text in texts:
        paragraphs = [p for p in text.split("\n") if p.strip()]
        current: list[str] = []
        n = 0
        for p in paragraphs:
            current.append(p)
            n += len(p.split())
            if n >= target_words:
                docs.append("\n".join(current))
                current, n = [], 0
        if current:
            if docs and n < target_words // 3 and len(current) < len(paragraphs):
                docs[-1] += "\n" + "\n".join(current)
            else:
                docs.append("\n".join(current))
    return docs


def planted_signatures(
    folder: str | Path, n: int, ranks: int, config: DedupConfig, seed: int = 0, clustered: float = 0.5
) -> None:
    """Band keys for ``n`` documents over ``ranks`` tasks: random keys, plus planted clusters (sizes 2 to
    300, some linked as chains, some as random trees, one band shared per link) over a ``clustered`` share
    of the documents, shuffled."""
    rng = np.random.default_rng(seed)
    bands = config.num_buckets
    keys = rng.integers(0, 2**64, size=(bands, n), dtype=np.uint64)
    order = rng.permutation(n)
    at = 0
    planted = int(n * clustered)
    while at < planted:
        size = int(min(rng.choice([2, 3, 5, 20, 300], p=[0.5, 0.2, 0.15, 0.1, 0.05]), planted - at))
        members = order[at : at + size]
        at += size
        chain = rng.random() < 0.3
        for j in range(1, size):
            parent = members[j - 1] if chain else members[int(rng.integers(0, j))]
            band = int(rng.integers(0, bands))
            keys[band, members[j]] = keys[band, parent]
    out = get_datafolder(str(folder))
    per_rank = -(-n // ranks)
    fp = config.fingerprint("minhash")
    for band in range(bands):
        for rank in range(ranks):
            lo, hi = rank * per_rank, min(n, (rank + 1) * per_rank)
            records = np.empty(hi - lo, dtype=SIGNATURE)
            records["key"], records["doc"] = keys[band, lo:hi], np.arange(hi - lo)
            with RecordWriter(
                out, signature_path(band, rank), Header(SIG_KIND, fp, rank, ranks, SIGNATURE.itemsize)
            ) as w:
                w.write(records)
                w.commit(extra=hi - lo)


@dataclass
class PlantedBff:
    """Real documents in input order with planted copies: ``doc_copies`` (earlier index, later index) of
    whole documents (0 to 2 word edits), ``paragraph_copies`` (earlier, later, paragraph) of one paragraph
    pasted into a held-out real document. BFF should drop each later document and cut each later paragraph."""

    texts: list[str]
    doc_copies: list[tuple[int, int]]
    paragraph_copies: list[tuple[int, int, str]]


def planted_bff_set(data_dir: Path, seed: int = 33, copies: float = 0.2) -> PlantedBff:
    """Build the set from ``real_texts`` in ~300-word documents: a share ``copies`` of them is copied whole
    (with 0-2 word edits), as many held-out documents get 1-2 pasted paragraphs (>= 20 words) of others."""
    rng = random.Random(seed)
    docs = list(dict.fromkeys(paragraph_chunks(real_texts(data_dir), 300)))
    rng.shuffle(docs)
    n_copies = int(len(docs) * copies)
    hosts, originals = docs[:n_copies], docs[n_copies:]
    vocabulary = rng.sample([w for d in originals[:200] for w in d.split()], 2000)
    rows: list[tuple[str, str, object]] = [("original", d, i) for i, d in enumerate(originals)]
    sources = rng.sample(range(len(originals)), n_copies)
    for i in sources[: n_copies // 2]:
        lines = originals[i].split("\n")
        for j in rng.sample(range(len(lines)), min(len(lines), rng.choice([0, 1, 2]))):
            lines[j] = " ".join(edit_words(lines[j].split(), 1, rng, vocabulary))
        rows.append(("doc_copy", "\n".join(lines), i))
    for host, i in zip(hosts, sources[n_copies // 2 :], strict=False):
        candidates = [p for p in originals[i].split("\n") if len(p.split()) >= 20]
        lines = host.split("\n")
        chosen = rng.sample(candidates, min(len(candidates), rng.choice([1, 2])))
        for p in chosen:
            lines.insert(rng.randrange(len(lines) + 1), p)
        rows.append(("host", "\n".join(lines), (i, chosen)))
    rng.shuffle(rows)
    where = {key: n for n, (kind, _, key) in enumerate(rows) if kind == "original"}
    doc_copies = [
        (min(where[key], n), max(where[key], n)) for n, (kind, _, key) in enumerate(rows) if kind == "doc_copy"
    ]
    paragraph_copies = [
        (min(where[key[0]], n), max(where[key[0]], n), p)  # type: ignore[index]
        for n, (kind, _, key) in enumerate(rows)
        if kind == "host"
        for p in key[1]  # type: ignore[index]
    ]
    return PlantedBff([text for _, text, _ in rows], doc_copies, paragraph_copies)  # type: ignore[arg-type]
