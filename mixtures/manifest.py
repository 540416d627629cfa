"""The manifest.json contract between the shard writer and the trainer.

The trainer reads shards in parallel and must refuse shards that do not match its tokenizer or config,
so everything it needs to decide that (tokenizer hash, dtype, per-file counts and checksums) lives here.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from common.atomic import atomic_write_bytes
from common.bounded_input import MAX_DATA_BYTES, read_json_bounded

MANIFEST_NAME = "manifest.json"
FORMAT = "datatrove-tokenized"
VERSION = 1
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}
INDEX_ITEM_SIZE = 8  # datatrove's .ds.index holds uint64 document end positions


class ManifestError(ValueError):
    """A manifest or one of the files it lists is missing, malformed or does not match."""


@dataclass(frozen=True)
class TokenizerInfo:
    """Identity of the tokenizer the shards were written with."""

    sha256: str
    vocab_size: int
    bos_id: int | None
    eos_id: int
    name_or_path: str


@dataclass(frozen=True)
class ShardFile:
    """One .ds file (with its .ds.index and .ds.metadata beside it), relative to the manifest dir."""

    path: str
    tokens: int
    documents: int
    sha256: str


@dataclass(frozen=True)
class SourceStats:
    """What one mixture source asked for and what it got."""

    weight: float
    tokens: int
    documents: int
    available_tokens: int
    repetitions: float
    realized_ratio: float
    skipped_too_long: int = 0  # documents over the spec's `max_doc_chars`, not tokenized


@dataclass
class Manifest:
    """In-memory form of manifest.json (see `to_dict` for the exact JSON layout)."""

    tokenizer: TokenizerInfo
    token_dtype: str
    token_size: int
    seq_len: int
    seed: int
    files: list[ShardFile]
    sources: dict[str, SourceStats]
    total_tokens: int
    target_tokens: int
    format: str = FORMAT
    version: int = VERSION
    root: Path | None = field(default=None, compare=False)

    @property
    def numpy_dtype(self) -> np.dtype:
        """Little-endian numpy dtype of the tokens in the .ds files."""
        return np.dtype(self.token_dtype).newbyteorder("<")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict, keys in contract order."""
        return {
            "format": self.format,
            "version": self.version,
            "tokenizer": asdict(self.tokenizer),
            "token_dtype": self.token_dtype,
            "token_size": self.token_size,
            "seq_len": self.seq_len,
            "seed": self.seed,
            "files": [asdict(f) for f in self.files],
            "sources": {name: asdict(s) for name, s in self.sources.items()},
            "total_tokens": self.total_tokens,
            "target_tokens": self.target_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], root: Path | None = None) -> Manifest:
        """Parse and sanity-check a manifest dict; raises ManifestError on anything off-contract."""
        if not isinstance(data, dict):  # a JSON list or number in manifest.json
            raise ManifestError(f"manifest is a JSON {type(data).__name__}, not an object")
        if data.get("format") != FORMAT:
            raise ManifestError(f"manifest format is {data.get('format')!r}, expected {FORMAT!r}")
        if data.get("version") != VERSION:
            raise ManifestError(f"manifest version is {data.get('version')!r}, expected {VERSION}")
        try:
            manifest = cls(
                tokenizer=TokenizerInfo(**data["tokenizer"]),
                token_dtype=data["token_dtype"],
                token_size=int(data["token_size"]),
                seq_len=int(data["seq_len"]),
                seed=int(data["seed"]),
                files=[ShardFile(**f) for f in data["files"]],
                sources={name: SourceStats(**s) for name, s in data["sources"].items()},
                total_tokens=int(data["total_tokens"]),
                target_tokens=int(data["target_tokens"]),
                root=root,
            )
        except (KeyError, TypeError) as err:
            raise ManifestError(f"malformed manifest: {err}") from err
        if TOKEN_DTYPES.get(manifest.token_dtype) != manifest.token_size:
            raise ManifestError(
                f"token_dtype {manifest.token_dtype!r} does not match token_size {manifest.token_size}"
            )
        for shard in manifest.files:  # a planted "../x" or "/etc/x" was read (locally, or by key on a store)
            parts = PurePosixPath(str(shard.path)).parts
            if not isinstance(shard.path, str) or not parts or parts[0] == "/" or ".." in parts or "\\" in shard.path:
                raise ManifestError(f"manifest file path {str(shard.path)[:200]!r} is not a path inside the mixture")
        if sum(f.tokens for f in manifest.files) != manifest.total_tokens:
            raise ManifestError("total_tokens differs from the sum of the files' tokens")
        return manifest


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes, read in chunks (shards can be many GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(manifest: Manifest, out_dir: str | os.PathLike[str]) -> Path:
    """Write manifest.json into `out_dir` atomically; returns its path."""
    path = Path(out_dir) / MANIFEST_NAME
    atomic_write_bytes(path, (json.dumps(manifest.to_dict(), indent=2) + "\n").encode())
    return path


def read_manifest(shard_dir: str | os.PathLike[str], verify: bool = True) -> Manifest:
    """Load manifest.json from `shard_dir`; with `verify`, check every listed file's sizes and sha256."""
    root = Path(shard_dir)
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"no {MANIFEST_NAME} in {root}")
    try:
        data = read_json_bounded(path, MAX_DATA_BYTES)  # a FIFO, a 3 GiB file or 100,000 nested `[`: one line
    except (OSError, ValueError) as err:
        raise ManifestError(f"{path} is not valid JSON: {err}") from None
    manifest = Manifest.from_dict(data, root=root)
    if verify:
        for shard in manifest.files:
            verify_shard(root, shard, manifest.token_size)
    return manifest


def verify_shard(root: Path, shard: ShardFile, token_size: int) -> None:
    """Check one shard's .ds / .ds.index / .ds.metadata against the manifest; raise naming the file."""
    ds = root / shard.path
    index = ds.with_name(ds.name + ".index")
    metadata = ds.with_name(ds.name + ".metadata")
    for required in (ds, index, metadata):
        if not required.is_file():
            raise ManifestError(f"{required}: listed in the manifest but missing")
    if ds.stat().st_size != shard.tokens * token_size:
        raise ManifestError(
            f"{ds}: size {ds.stat().st_size} bytes, manifest says {shard.tokens} tokens x {token_size} bytes"
        )
    if index.stat().st_size != shard.documents * INDEX_ITEM_SIZE:
        raise ManifestError(
            f"{index}: size {index.stat().st_size} bytes, manifest says {shard.documents} documents x 8 bytes"
        )
    if shard.documents:
        last_end = int(np.fromfile(index, dtype="<u8", offset=(shard.documents - 1) * INDEX_ITEM_SIZE)[0])
        if last_end != shard.tokens:
            raise ManifestError(
                f"{index}: last document ends at {last_end}, manifest says {shard.tokens} tokens"
            )
    actual = sha256_file(ds)
    if actual != shard.sha256:
        raise ManifestError(f"{ds}: sha256 {actual} does not match the manifest's {shard.sha256}")
