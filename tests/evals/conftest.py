"""A small real model for the evals tests, made by the project's own stages.

WikiText-2 articles (shared data) are split into a *memorised* part and an *unseen* part; a BPE is
trained on the memorised part (tokenizer room), a mixture repeats it (mixtures room), the tiny
preset trains one epoch on it in-process (trainer room, one rank) and is exported to a Hugging
Face folder. About 20-30 s on 2 cores, once per session.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.shared_data import shared_data_dir

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def shared_or_skip(*parts: str) -> Path:
    path = shared_data_dir().joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


@dataclass(frozen=True)
class TinyModel:
    hf_dir: Path
    train_dir: Path
    memorised: list[str]
    unseen: list[str]


def wiki_articles() -> list[str]:
    path = shared_or_skip("wikitext2_articles", "articles_valid.jsonl")
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    from tokenizers import Tokenizer

    from mixtures.build import build_mixture
    from tokenizer.train import train_tokenizer
    from trainer.fsdp_train import TrainConfig, train
    from trainer.optim import OptimConfig

    articles = wiki_articles()
    memorised, unseen = articles[:2], articles[20:24]
    root = tmp_path_factory.mktemp("evals-model")
    docs = root / "run" / "curated"
    docs.mkdir(parents=True)
    rows = [{"text": t, "id": str(i)} for i, t in enumerate(memorised)]
    pq.write_table(pa.Table.from_pylist(rows), docs / "a.parquet")
    tok = train_tokenizer(root / "run", root / "tok", vocab_size=512, progress=False)

    encoded = Tokenizer.from_file(str(tok.path)).encode_batch(memorised, add_special_tokens=False)
    source_tokens = sum(len(e.ids) + 1 for e in encoded)  # + <|endoftext|> after each document
    repeats = 10
    build_mixture(
        {
            "tokenizer": str(tok.path),
            "target_tokens": repeats * source_tokens,
            "seq_len": 64,
            "tokens_per_file": 1 << 20,
            "sources": [{"name": "wiki", "path": str(docs), "weight": 1.0, "max_repetition": repeats}],
        },
        root / "mixture",
        progress=False,
    )
    result = train(
        TrainConfig(
            shards=root / "mixture",
            tokenizer=tok.path,
            out=root / "train",
            model="tiny",
            micro_batch=16,
            optim=OptimConfig(lr=1e-2),
            bf16=False,
            device="cpu",
            log_every=50,
            verify_shards=False,
        )
    )
    assert result.hf_dir is not None
    return TinyModel(result.hf_dir, root / "train", memorised, unseen)
