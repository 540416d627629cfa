"""Decontamination against datatrove's n-gram decontamination (the oracle) on real text, and on a WARC
whose pages carry planted eval passages: exactly those pages are removed, with the n-gram named."""

from __future__ import annotations

import gzip
import html
import json
import random
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from datatrove.data import Document
from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
from datatrove.utils.hashing import create_hash_func
from datatrove.utils.word_tokenizers import load_word_tokenizer

from filters.decontamination import Decontamination, DecontaminationConfig, NGramIndex, WordTokens
from filters.eval_sets import EvalSet, EvalSetError, load_eval_set
from tests.support.shared_data import require
from tests.support.warc_writer import Page, write_pages


def web_texts(data: Path, count: int) -> list[str]:
    """Real web text: the 20 Common Crawl documents, then the news articles' ground-truth texts."""
    texts = [json.loads(line)["text"] for line in (data / "cc_web_text_samples" / "docs.jsonl").open()]
    rows = (data / "html_extraction_aeb" / "ground_truth.jsonl").read_text().splitlines()
    texts += [json.loads(line)["text"] for line in rows]
    return texts[:count]


def wiki_paragraphs(data: Path, min_words: int = 40) -> list[str]:
    lines = (data / "wikitext2_articles" / "wiki.valid.txt").read_text().splitlines()
    return [t.strip() for t in lines if len(t.split()) >= min_words and not t.strip().startswith("=")]


def detokenize(wikitext: str) -> str:
    return re.sub(r" ([,.;:)'])", r"\1", re.sub(r" @(.)@ ", r"\1", wikitext)).replace("( ", "(")


def qa_eval_file(paragraphs: list[str], out: Path) -> Path:
    """An eval set of (question, answer) items made from wikitext paragraphs: the answer is the
    paragraph's second half, the query its first half."""
    with out.open("w") as f:
        for p in paragraphs:
            words = p.split()
            half = len(words) // 2
            f.write(json.dumps({"query": " ".join(words[:half]), "gold": " ".join(words[half:])}) + "\n")
    return out


def datatrove_removed(docs: list[Document], eval_sets: list[EvalSet], n: int, index_dir: Path) -> dict:
    """datatrove's NGramsDecontFilter over an index written with NGramsDecontIndexer's own n-gram
    hashing (its ``run`` needs lighteval, which pulls ~80 packages; the hashing is the part that matters)."""
    config = NGramsDecontConfig(n_grams=n)
    indexer_state = SimpleNamespace(
        config=config, tokenizer=load_word_tokenizer("en"), hash_func=create_hash_func(config.hash_config)
    )
    index_dir.mkdir()
    for eval_set in eval_sets:
        hashes = set()
        for item in eval_set.items:
            hashes.update(NGramsDecontIndexer.compute_hashes(indexer_state, item.label, item.query))
        np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(index_dir / f"{eval_set.name}.index.hashes")
    oracle = NGramsDecontFilter(str(index_dir), config=config)
    removed = {}
    for doc in docs:
        copy = Document(text=doc.text, id=doc.id, metadata={})
        if oracle.filter(copy) is not True:
            removed[doc.id] = copy.metadata["contaminated_ngram"]
    return removed


def ours_removed(docs: list[Document], eval_sets: list[EvalSet], n: int) -> dict:
    config = DecontaminationConfig(eval_sets=("in-memory",), n_grams=n)
    step = Decontamination(config, index=NGramIndex(eval_sets, config))
    kept = {d.id for d in step.run(iter([Document(text=d.text, id=d.id, metadata={}) for d in docs]))}
    removed = {}
    for doc in docs:
        if doc.id not in kept:
            copy = Document(text=doc.text, id=doc.id, metadata={})
            reason = step.filter(copy)[1]
            meta = copy.metadata
            assert reason == f"contaminated[{meta['contaminated_task']}]: {meta['contaminated_ngram']}"
            removed[doc.id] = copy.metadata["contaminated_ngram"]
    return removed


def planted_corpus(data: Path, passages: list[str], rng: random.Random) -> tuple[list[Document], set[str]]:
    """Real web documents; every fifth one gets an eval passage inserted between two of its lines."""
    docs, planted = [], set()
    for i, text in enumerate(web_texts(data, 150)):
        if i % 5 == 0:
            lines = text.split("\n")
            at = rng.randrange(len(lines) + 1)
            text = "\n".join(lines[:at] + [rng.choice(passages)] + lines[at:])
            planted.add(f"doc{i}")
        docs.append(Document(text=text, id=f"doc{i}", metadata={}))
    return docs, planted


@pytest.mark.parametrize("n", [13, 8])
def test_same_documents_and_ngrams_as_datatrove(tmp_path: Path, n: int) -> None:
    data = require()
    rng = random.Random(n)
    paragraphs = wiki_paragraphs(data)
    blimp = load_eval_set(data / "blimp" / "blimp.jsonl.gz")
    wiki = load_eval_set(data / "wikitext2_articles" / "wiki.valid.txt")
    qa = load_eval_set(qa_eval_file(paragraphs[:200], tmp_path / "qa.jsonl"))
    long_blimp = [i.label for i in blimp.items[:6000] if len(i.label.split()) >= n]
    docs, planted = planted_corpus(data, paragraphs[:300] + long_blimp[:300], rng)
    # wikitext articles themselves (natural contamination) and straddling QA text (query end + answer start)
    for i, row in enumerate(json.loads(line) for line in (data / "wikitext2_articles" / "articles_valid.jsonl").open()):
        docs.append(Document(text=row["text"], id=f"wiki{i}", metadata={}))
    words = WordTokens()
    for i, item in enumerate(qa.items[:20]):
        q, a = words(item.query), words(item.label)
        docs.append(Document(text=" ".join(q[-(n // 2) :] + a[: n - n // 2]) + " and more.", id=f"straddle{i}"))
    eval_sets = [EvalSet(blimp.name, blimp.items[:6000]), wiki, qa]

    ours = ours_removed(docs, eval_sets, n)
    theirs = datatrove_removed(docs, eval_sets, n, tmp_path / "index")

    assert ours == theirs  # the same documents, each with the same first matching n-gram
    assert planted <= set(ours)
    assert {f"straddle{i}" for i in range(20)} <= set(ours)  # overlap n-grams of query and answer
    assert sum(k.startswith("wiki") for k in ours) >= 50
    assert not {k for k in ours if k.startswith("doc")} - planted  # no clean web document dropped


def test_planted_pages_of_a_warc_are_removed_exactly(tmp_path: Path) -> None:
    """WARC -> the curate stage's reader and extractor -> decontamination: the planted pages, no others."""
    from datatrove.pipeline.writers import JsonlWriter

    from curate.extract import MainTextExtractor
    from curate.warc import RobustWarcReader

    data = require()
    rng = random.Random(7)
    passages = [p for p in wiki_paragraphs(data, min_words=60) if "<unk>" not in p][:10]
    pages, planted = [], {}
    articles = [t for t in web_texts(data, 150) if len(t.split()) >= 200][:40]
    for i, text in enumerate(articles):
        paragraphs = [p for p in text.split("\n") if p.strip()]
        if i % 4 == 0:  # as a writer would quote it: wikitext's " , " and " @-@ " undone
            passage = passages[i // 4]
            paragraphs.insert(rng.randrange(len(paragraphs) + 1), detokenize(passage))
            planted[f"https://example.org/page{i}"] = passage
        body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        page = f"<html><head><title>Page {i}</title></head><body><article><h1>{i}</h1>{body}</article></body></html>"
        pages.append(Page(url=f"https://example.org/page{i}", body=page.encode()))
    write_pages(pages, tmp_path / "warc" / "pages.warc.gz")

    eval_file = tmp_path / "wiki.txt"
    eval_file.write_text("\n".join(passages) + "\n")
    removed_dir = tmp_path / "removed" / "decontamination"
    step = Decontamination(
        DecontaminationConfig(eval_sets=(str(eval_file),)),
        exclusion_writer=JsonlWriter(str(removed_dir), output_filename="${rank}.jsonl.gz"),
    )
    extracted = list(MainTextExtractor(timeout=5.0).run(RobustWarcReader(str(tmp_path / "warc")).run()))
    arrived = {d.metadata["url"] for d in extracted}
    planted = {url: passage for url, passage in planted.items() if url in arrived}  # trafilatura may drop a page
    assert len(planted) >= 8
    kept = {d.metadata["url"] for d in step.run(iter(extracted))}

    rows = [json.loads(line) for line in gzip.open(removed_dir / "00000.jsonl.gz", "rt")]
    removed = {r["metadata"]["url"]: r["metadata"] for r in rows}
    assert set(removed) == set(planted)
    assert kept == arrived - set(planted)
    index = NGramIndex([load_eval_set(eval_file)], DecontaminationConfig(eval_sets=(str(eval_file),)))
    for url, meta in removed.items():
        assert meta["filter_reason"] == f"contaminated[wiki]: {meta['contaminated_ngram']}"
        assert meta["contaminated_ngram"] in " ".join(index.words(planted[url]))
    assert step.stats["contaminated_wiki"].total == len(planted)


def test_eval_set_formats(tmp_path: Path) -> None:
    lm_eval = tmp_path / "samples_arc.jsonl"
    lm_eval.write_text(
        json.dumps({"doc": {}, "target": "the answer", "arguments": {"gen_args_0": {"arg_0": "Q: why?", "arg_1": "x"}}})
        + "\n"
    )
    assert load_eval_set(lm_eval).items[0].query == "Q: why?"
    assert load_eval_set(lm_eval).items[0].label == "the answer"
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"question": "q", "answer": ["a1", "a2"]}) + "\n")
    assert [i.label for i in load_eval_set(items).items] == ["a1", "a2"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one passage", "another"]}), tmp_path / "passages.parquet")
    assert load_eval_set(tmp_path / "passages.parquet").name == "passages"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"nothing": 1}) + "\n")
    with pytest.raises(EvalSetError, match="no label key"):
        load_eval_set(bad)
    with pytest.raises(EvalSetError, match="not found"):
        load_eval_set(tmp_path / "missing.jsonl")
