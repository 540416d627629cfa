"""The length cap before tokenization: a document over the spec's `max_doc_chars` is not tokenized,
and the manifest counts it per source; the documents under the cap give the same shards as without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mixtures.build import build_mixture
from mixtures.manifest import read_manifest
from mixtures.spec import SpecError, spec_from_dict
from mixtures.summary import format_summary
from tests.support.text_corpora import is_held_out, web_documents, write_parquet


def _spec(tok: Path, docs: Path, **extra: Any) -> dict[str, Any]:
    return {"tokenizer": str(tok), "target_tokens": "epoch", "seq_len": 64, "seed": 3, "tokens_per_file": 20_000,
            "sources": [{"name": "web", "path": str(docs)}], **extra}  # fmt: skip


def test_documents_over_the_cap_are_skipped_and_counted(tok4k: Path, tmp_path: Path) -> None:
    rows = [r for r in web_documents() if not is_held_out(r)][:40]
    cap = max(len(r["text"]) for r in rows)
    blob = {**rows[0], "id": "binary-blob", "text": rows[0]["text"] + "\ufffd" * cap}  # a binary page's remains
    write_parquet(rows, tmp_path / "clean", n_files=1)
    write_parquet([*rows[:20], blob, *rows[20:]], tmp_path / "hostile", n_files=1)
    clean = build_mixture(_spec(tok4k, tmp_path / "clean", max_doc_chars=cap), tmp_path / "a", progress=False)
    capped = build_mixture(_spec(tok4k, tmp_path / "hostile", max_doc_chars=cap), tmp_path / "b", progress=False)
    assert capped.sources["web"].skipped_too_long == 1 and clean.sources["web"].skipped_too_long == 0
    assert capped.sources["web"].documents == clean.sources["web"].documents == len(rows)
    assert capped.total_tokens == clean.total_tokens
    assert read_manifest(tmp_path / "b", verify=True).sources["web"].skipped_too_long == 1
    assert "documents over max_doc_chars, not tokenized: web 1" in format_summary(capped)


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_a_bad_cap_is_refused(value: object, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="max_doc_chars"):
        spec_from_dict(_spec(tmp_path / "tok", tmp_path, max_doc_chars=value))
