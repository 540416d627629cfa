"""The fast encoder gives exactly the ids tokenizer.json gives, or is not used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mixtures.build import build_mixture
from mixtures.encode import EncodeTask, encode_task
from mixtures.encoders import choose_encoder, fast_encode, hf_encode
from mixtures.pool import PARALLELISM_ENV, tokenizers_threads_off
from tests.support.text_corpora import (
    lingua_sentences,
    shared_data,
    web_documents,
    write_parquet,
)


@pytest.fixture(scope="module")
def tok_file(tok4k: Path) -> str:
    return str(tok4k / "tokenizer.json")


def test_tiktoken_matches_tokenizers_on_real_text(tok_file: str) -> None:
    pytest.importorskip("tiktoken")
    texts = [r["text"] for r in web_documents()[::3]] + [s["text"] for s in lingua_sentences()[::7]]
    texts.append(texts[0][:300] + "<|endoftext|>" + texts[0][300:])
    fast = fast_encode(tok_file)
    assert fast is not None
    assert fast(texts) == hf_encode(tok_file)(texts)
    assert choose_encoder(tok_file, texts[:50]) is fast
    assert choose_encoder(tok_file, texts[:50], allow_fast=False)(texts[:50]) == fast(texts[:50])


def test_tokenizers_with_a_normalizer_or_added_text_tokens_stay_on_hf() -> None:
    reference = str(shared_data() / "reference_tokenizer_gpt_neo" / "tokenizer.json")
    assert fast_encode(reference) is None  # NFC normalizer, non-special added tokens
    texts = [r["text"] for r in web_documents()[:20]]
    assert choose_encoder(reference, texts)(texts) == hf_encode(reference)(texts)


def test_build_bytes_do_not_depend_on_the_encoder(tok_file: str, tmp_path: Path) -> None:
    write_parquet(web_documents()[:60], tmp_path / "src", n_files=2)
    spec = {
        "tokenizer": tok_file,
        "target_tokens": 50_000,
        "seq_len": 64,
        "sources": [{"name": "web", "path": str(tmp_path / "src"), "weight": 1, "max_repetition": 2}],
    }
    auto = build_mixture(spec, tmp_path / "auto", progress=False)
    hf = build_mixture({**spec, "encoder": "hf"}, tmp_path / "hf", progress=False)
    assert [f.sha256 for f in auto.files] == [f.sha256 for f in hf.files]


def test_hf_batches_encoded_on_threads_come_out_in_order(tmp_path: Path) -> None:
    """The HF path with tokenizers' own pool off: several batches at once, the same bytes as one at a time."""
    reference = str(shared_data() / "reference_tokenizer_gpt_neo" / "tokenizer.json")  # stays on HF
    (src,) = write_parquet(web_documents()[:90], tmp_path / "src", n_files=1)
    before = os.environ.get(PARALLELISM_ENV)
    outputs = []
    for threads in (1, 3):
        task = EncodeTask(
            source=0, file=str(src), row_groups=(0,), column="text", cluster_column="minhash_cluster_size",
            out_prefix=str(tmp_path / f"t{threads}"), tokenizer_file=reference, dtype="uint16", bos_id=None,
            eos_id=0, batch_docs=7, encode_threads=threads,
        )
        with tokenizers_threads_off():
            part = encode_task(task)
        outputs.append([Path(p).read_bytes() for p in (part.tokens_path, part.lengths_path, part.cluster_path)])
        assert part.documents == 90
    assert outputs[0] == outputs[1]
    assert os.environ.get(PARALLELISM_ENV) == before
