"""manifest.json: exact contract layout, checksum and size verification, and the memmap reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mixtures.build import build_mixture
from mixtures.manifest import ManifestError, read_manifest, write_manifest
from mixtures.reader import ShardReader
from tests.support.text_corpora import is_held_out, small_tokenizer_dir, web_documents, write_parquet


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tok = small_tokenizer_dir(tmp_path_factory)
    root = tmp_path_factory.mktemp("manifest")
    write_parquet([r for r in web_documents() if is_held_out(r)], root / "src", n_files=1)
    spec = {
        "tokenizer": str(tok),
        "target_tokens": 40_000,
        "seq_len": 128,
        "workers": 1,
        "tokens_per_file": 15_000,
        "sources": [{"name": "held", "path": str(root / "src"), "weight": 1, "max_repetition": 2}],
    }
    build_mixture(spec, root / "out", progress=False)
    return root / "out"


@pytest.fixture
def copy(shards: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(shards, tmp_path / "copy"))


def test_manifest_layout_is_the_contract(shards: Path) -> None:
    data = json.loads((shards / "manifest.json").read_text())
    assert list(data) == [
        "format", "version", "tokenizer", "token_dtype", "token_size", "seq_len", "seed", "files", "sources",
        "total_tokens", "target_tokens",
    ]  # fmt: skip
    assert (data["format"], data["version"], data["token_dtype"], data["token_size"]) == (
        "datatrove-tokenized", 1, "uint16", 2,
    )  # fmt: skip
    assert set(data["tokenizer"]) == {"sha256", "vocab_size", "bos_id", "eos_id", "name_or_path"}
    assert set(data["files"][0]) == {"path", "tokens", "documents", "sha256"}
    assert set(data["sources"]["held"]) == {
        "weight", "tokens", "documents", "available_tokens", "repetitions", "realized_ratio", "skipped_too_long",
    }  # fmt: skip
    assert len(data["files"]) >= 2 and data["total_tokens"] == sum(f["tokens"] for f in data["files"])
    for f in data["files"]:
        ds = shards / f["path"]
        meta = (shards / (f["path"] + ".metadata")).read_text().splitlines()
        assert meta[0].endswith("|2") and int(meta[1]) == f["tokens"] == ds.stat().st_size // 2
        assert (shards / (f["path"] + ".index")).stat().st_size == 8 * f["documents"]
    manifest = read_manifest(shards)
    assert write_manifest(manifest, shards).read_text() == (shards / "manifest.json").read_text()


def test_flipped_byte_is_caught_naming_the_file(copy: Path) -> None:
    name = read_manifest(copy).files[1].path
    raw = bytearray((copy / name).read_bytes())
    raw[100] ^= 0xFF
    (copy / name).write_bytes(bytes(raw))
    with pytest.raises(ManifestError, match=f"{name}: sha256"):
        read_manifest(copy)
    read_manifest(copy, verify=False)  # the caller may choose to skip hashing


def test_truncated_or_missing_files_are_caught(copy: Path) -> None:
    files = read_manifest(copy).files
    with open(copy / files[0].path, "r+b") as handle:
        handle.truncate(10)
    with pytest.raises(ManifestError, match=f"{files[0].path}: size 10 bytes"):
        read_manifest(copy)
    (copy / (files[1].path + ".index")).unlink()
    with pytest.raises(ManifestError, match="missing"):
        read_manifest(copy, verify=True)


def test_foreign_or_inconsistent_manifest_is_refused(copy: Path) -> None:
    data = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**data, "format": "other"}))
    with pytest.raises(ManifestError, match="format"):
        read_manifest(copy)
    (copy / "manifest.json").write_text(json.dumps({**data, "total_tokens": data["total_tokens"] + 1}))
    with pytest.raises(ManifestError, match="total_tokens"):
        read_manifest(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="no manifest.json"):
        read_manifest(copy)


def test_reader_memory_maps_documents_and_windows(shards: Path) -> None:
    reader = ShardReader(shards)
    manifest = reader.manifest
    assert reader.total_tokens == manifest.total_tokens
    for f, entry in enumerate(manifest.files):
        tokens = reader.tokens(f)
        assert isinstance(tokens, np.memmap) and tokens.size == entry.tokens
        docs = [reader.document(f, d) for d in range(entry.documents)]
        assert np.array_equal(np.concatenate(docs), tokens)
        assert all(int(d[-1]) == manifest.tokenizer.eos_id for d in docs)
        length = manifest.seq_len + 1
        windows = reader.num_windows(f, length)
        assert windows == entry.tokens // length
        assert np.array_equal(
            reader.window(f, (windows - 1) * length, length), tokens[(windows - 1) * length :][:length]
        )
