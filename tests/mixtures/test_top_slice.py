"""An anneal mixture: the top slice of a source by `quality_score` plus a share of the main mixture."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models

from mixtures.build import build_mixture
from mixtures.reader import ShardReader
from mixtures.spec import SpecError, spec_from_dict
from mixtures.top_slice import score_threshold
from tests.support.text_corpora import write_parquet

EOT = "<|endoftext|>"
ALPHABET = "abcdefghijklmnopqrstuvwxyz "


def _tokenizer(path: Path) -> Path:
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(ALPHABET)}, merges=[]))
    tok.add_special_tokens([EOT])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def _texts(reader: ShardReader, tok: Tokenizer) -> list[str]:
    eot = tok.token_to_id(EOT)
    docs = [reader.document(f, d).tolist() for f in range(len(reader)) for d in range(len(reader.doc_ends(f)))]
    return ["".join(tok.id_to_token(i) for i in d if i != eot) for d in docs]


def test_threshold_keeps_the_top_fraction_with_ties(tmp_path: Path) -> None:
    write_parquet([{"text": "x", "quality_score": s} for s in (0.1, 0.9, 0.5, 0.5, 0.3)], tmp_path / "s")
    files = sorted((tmp_path / "s").glob("*.parquet"))
    assert score_threshold(files, "quality_score", 0.2) == 0.9
    assert score_threshold(files, "quality_score", 0.6) == 0.5  # ceil(3): 0.9, 0.5, 0.5
    with pytest.raises(KeyError, match="no `score`"):
        score_threshold(files, "score", 0.5)


def test_anneal_mixture_is_the_top_slice_plus_a_share_of_the_main_mixture(tmp_path: Path) -> None:
    tok_file = _tokenizer(tmp_path / "tok" / "tokenizer.json")
    rows = [{"text": f"doc {chr(97 + i)} " * 3, "quality_score": i / 20} for i in range(20)]
    write_parquet(rows, tmp_path / "docs", n_files=2)
    base = {"tokenizer": str(tok_file), "seq_len": 8, "seed": 0}
    main_tokens = sum(len(r["text"]) + 1 for r in rows)
    main = {
        **base,
        "target_tokens": main_tokens,
        "sources": [{"name": "main", "path": str(tmp_path / "docs"), "weight": 1}],
    }
    build_mixture(main, tmp_path / "main", progress=False)
    top = [r["text"] for r in rows if r["quality_score"] >= 0.75]  # the best 5 of 20
    hq_tokens = sum(len(t) + 1 for t in top)
    anneal = {
        **base,
        "target_tokens": 2 * hq_tokens,
        "sources": [
            {"name": "hq", "path": str(tmp_path / "docs"), "weight": 1, "top_fraction": 0.25},
            {"name": "replay", "path": str(tmp_path / "main"), "weight": 1},
        ],
    }
    manifest = build_mixture(anneal, tmp_path / "anneal", progress=False)
    assert manifest.sources["hq"].documents == 5 and manifest.sources["hq"].available_tokens == hq_tokens
    texts = _texts(ShardReader(tmp_path / "anneal"), Tokenizer.from_file(str(tok_file)))
    assert set(top) <= set(texts) and len(texts) > len(top)  # the top slice and some of the main mixture
    with pytest.raises(SpecError, match="top_fraction"):
        spec_from_dict({**anneal, "sources": [{"name": "x", "path": "p", "weight": 1, "top_fraction": 0}]}, tmp_path)
