"""Labelled language-ID sentences (lingua's test data layout) and their mapping onto model labels."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from common.jsonl import iter_jsonl

# lingua (ISO 639-1 as in its file names) -> ft176 label, where the two differ
LINGUA_TO_FT176 = {"nb": "no"}
SENTENCES_FILE = "sentences.jsonl.gz"


def load_labelled(path: str | Path) -> list[tuple[str, str]]:
    """(text, language) pairs from a ``.jsonl``/``.jsonl.gz`` file or a folder holding
    ``sentences.jsonl.gz``; each line is ``{"text": ..., "lang": ...}``."""
    path = Path(path)
    if path.is_dir():
        path = path / SENTENCES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"labelled sentences not found: {path}")
    items = []
    for n, row in iter_jsonl(path):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not isinstance(row.get("lang"), str):
            raise ValueError(f"{path}:{n}: expected text and lang fields")
        items.append((row["text"], row["lang"]))
    return items


def paragraphs(items: Sequence[tuple[str, str]], size: int = 5) -> list[tuple[str, str]]:
    """Consecutive sentences of one language joined ``size`` at a time (a remainder is dropped), so
    a paragraph is as long as a short web document."""
    by_lang: dict[str, list[str]] = {}
    for text, lang in items:
        by_lang.setdefault(lang, []).append(text)
    out = []
    for lang, texts in by_lang.items():
        for i in range(0, len(texts) - size + 1, size):
            out.append((" ".join(texts[i : i + size]), lang))
    return out


def map_languages(languages: Iterable[str], model_labels: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """(gold code -> model label for the languages the model has, sorted codes it lacks)."""
    labels = set(model_labels)
    mapping, missing = {}, []
    for code in sorted(set(languages)):
        label = LINGUA_TO_FT176.get(code, code)
        if label in labels:
            mapping[code] = label
        else:
            missing.append(code)
    return mapping, missing
