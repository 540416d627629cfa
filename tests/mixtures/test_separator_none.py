"""`separator: none`: documents back to back with nothing between them (a corpus that is one stream,
e.g. a character-level text cut into pieces, reads back as the original text)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from mixtures.build import build_mixture
from mixtures.reader import ShardReader
from mixtures.spec import SpecError, spec_from_dict
from tests.support.text_corpora import write_parquet

EOT = "<|endoftext|>"
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" * 3


def _char_tokenizer(path: Path) -> Path:
    chars = sorted(set(TEXT))
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tok.add_special_tokens([EOT])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def test_documents_are_concatenated_without_a_separator(tmp_path: Path) -> None:
    tok_file = _char_tokenizer(tmp_path / "tok" / "tokenizer.json")
    pieces = [p + "\n\n" for p in TEXT.split("\n\n") if p]
    write_parquet([{"text": p} for p in pieces], tmp_path / "src")
    spec = {
        "tokenizer": str(tok_file),
        "target_tokens": len(TEXT),
        "seq_len": 16,
        "separator": "none",
        "sources": [{"name": "s", "path": str(tmp_path / "src"), "weight": 1}],
    }
    manifest = build_mixture(spec, tmp_path / "mix", progress=False)
    assert manifest.total_tokens == len(TEXT) and manifest.tokenizer.bos_id is None
    tok = Tokenizer.from_file(str(tok_file))
    eot = tok.token_to_id(EOT)
    reader = ShardReader(tmp_path / "mix")
    docs = [reader.document(f, d) for f in range(len(reader)) for d in range(len(reader.doc_ends(f)))]
    assert all(eot not in d for d in docs)
    assert sorted("".join(tok.id_to_token(i) for i in d.tolist()) for d in docs) == sorted(pieces)
    assert sum(len(d) for d in docs) == int(np.sum([len(p) for p in pieces]))


def test_unknown_separators_are_still_refused(tmp_path: Path) -> None:
    spec = {"tokenizer": "t", "target_tokens": 10, "seq_len": 8, "separator": "nothing"}
    spec["sources"] = [{"name": "s", "path": "p", "weight": 1}]
    with pytest.raises(SpecError, match="'none'"):
        spec_from_dict(spec, tmp_path)
