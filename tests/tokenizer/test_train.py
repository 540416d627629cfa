"""Training: sampling limits, inputs, output loadable by tokenizers and transformers, round trips."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.support.text_corpora import (
    is_held_out,
    lingua_sentences,
    web_documents,
    write_parquet,
)
from tokenizer.corpus import SampleStats, sample_texts
from tokenizer.inputs import resolve_parquet
from tokenizer.model import EOT
from tokenizer.train import main as train_main
from tokenizer.train import train_tokenizer

EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf]")


def real_texts() -> list[str]:
    """Held-out web pages, a sentence per language, and every shared text with emoji."""
    web = web_documents()
    held = [r["text"] for r in web if is_held_out(r)]
    sentences = lingua_sentences()
    per_lang = {s["lang"]: s["text"] for s in sentences}
    emoji = [r["text"] for r in web if EMOJI.search(r["text"])] + [
        s["text"] for s in sentences if EMOJI.search(s["text"])
    ]
    assert len(per_lang) >= 70 and emoji, "expected many languages and some emoji in the shared data"
    return held + list(per_lang.values()) + emoji


def test_output_loads_in_tokenizers_and_transformers(tok4k: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = Tokenizer.from_file(str(tok4k / "tokenizer.json"))
    assert tok.get_vocab_size() == 4096
    assert tok.token_to_id(EOT) == 0
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok4k / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(tok4k))
    text = web_documents()[0]["text"]
    ids = tok.encode(text).ids
    assert fast(text)["input_ids"] == ids
    assert auto(text)["input_ids"] == ids  # no EOS appended to a prompt
    assert auto.eos_token_id == 0
    assert auto.decode(ids) == text


def test_decode_encode_round_trip_on_real_multilingual_text(tok4k: Path) -> None:
    tok = Tokenizer.from_file(str(tok4k / "tokenizer.json"))
    texts = real_texts()
    encoded = tok.encode_batch(texts, add_special_tokens=False)
    decoded = tok.decode_batch([e.ids for e in encoded], skip_special_tokens=False)
    mismatches = [t[:60] for t, d in zip(texts, decoded, strict=True) if t != d]
    assert not mismatches


def test_transformers_round_trip(tok4k: Path) -> None:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(tok4k))
    texts = real_texts()[:200]
    assert [auto.decode(auto(t)["input_ids"]) for t in texts] == texts


def test_sampler_respects_budget_and_cap_and_covers_all_files(tmp_path: Path) -> None:
    rows = web_documents()
    files = write_parquet(rows, tmp_path, n_files=4)
    total = sum(len(r["text"]) for r in rows)
    budget, cap = total // 5, 3000
    stats = SampleStats()
    batches = list(sample_texts(files, budget, cap, seed=1, progress=False, stats=stats))
    texts = [t for b in batches for t in b]
    assert stats.chars_used == sum(map(len, texts)) <= budget
    assert stats.chars_used > budget * 0.5  # a sample, not an early stop
    assert max(map(len, texts)) <= cap and stats.documents_truncated > 0
    source_files = {i % 4 for i, r in enumerate(rows) if r["text"][:cap][:200] in {t[:200] for t in texts}}
    assert source_files == {0, 1, 2, 3}
    again = [t for b in sample_texts(files, budget, cap, seed=1, progress=False) for t in b]
    other = [t for b in sample_texts(files, budget, cap, seed=2, progress=False) for t in b]
    assert again == texts and other != texts


def test_training_records_sample_and_vocab(tmp_path: Path, run_dir: Path) -> None:
    result = train_tokenizer(
        run_dir, tmp_path / "tok", vocab_size=1024, char_budget=300_000, doc_char_cap=2000, progress=False
    )
    record = json.loads((tmp_path / "tok" / "training.json").read_text())
    assert result.vocab_size == 1024 and record["vocab_size"] == 1024
    assert record["sample"]["chars_used"] == result.chars <= 300_000
    assert record["sample"]["documents_truncated"] > 0
    assert record["sha256"] == result.sha256
    assert "\\p{N}{1,3}" in record["split_pattern"]


def test_resolve_prefers_deduped_over_curated(tmp_path: Path) -> None:
    rows = web_documents()[:4]
    write_parquet(rows, tmp_path / "run" / "curated", n_files=2)
    assert len(resolve_parquet(tmp_path / "run")) == 2
    deduped = write_parquet(rows[:2], tmp_path / "run" / "deduped", n_files=1)
    assert resolve_parquet(tmp_path / "run") == deduped
    assert resolve_parquet(str(tmp_path / "run" / "curated" / "*.parquet")) == sorted(
        (tmp_path / "run" / "curated").glob("*.parquet")
    )
    with pytest.raises(FileNotFoundError):
        resolve_parquet(tmp_path / "nothing-here")


def test_cli_trains(tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    train_main(
        [
            "--input",
            str(run_dir),
            "--vocab-size",
            "600",
            "--out",
            str(out),
            "--quiet",
            "--char-budget",
            "300000",
        ]
    )
    assert "vocab 600" in capsys.readouterr().out
    assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == 600
