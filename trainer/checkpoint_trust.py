"""What loading a checkpoint trusts, and the checks that run before a single byte of it is unpickled.

DCP's own reader (`FileSystemReader.read_metadata`) runs `pickle.load` on the folder's `.metadata`,
so a planted `.metadata` runs arbitrary code in whoever loads it (`--resume`, `trainer.export_hf`).
Two checks stand before that:

1. **Checksum manifest** (`checksums.json`, written by rank 0 at commit, before the rename): the
   sha256 of every other file of the folder. A folder without it, with a file it does not list, a
   listed file missing, or a digest that differs is refused with one line. This catches corruption,
   a half-copied folder and a file dropped into a folder; it cannot stop someone who can write the
   folder and rewrite the manifest too (the manifest is not signed).
2. **Restricted unpickling** of `.metadata` (`SafeFileSystemReader`): only DCP's metadata classes,
   torch dtypes / Size / layouts and paths may be named by the pickle; anything else (`os.system`,
   `builtins.exec`, ...) is refused before it is called, so even a consistent, forged folder cannot
   run code through `.metadata`. The `.distcp` payloads are read by DCP with
   `torch.load(weights_only=True)` for non-tensor items and as raw bytes for tensors.

What stays trusted: the values (weights, optimizer state, data position) are taken as they are, so a
forged checkpoint can still hold bad weights. Load checkpoints only from storage you trust.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader

from common.atomic import atomic_write_text
from common.bounded_input import read_json_bounded

CHECKSUMS = "checksums.json"
MAX_MANIFEST_BYTES = 16 << 20  # a file's line is ~100 bytes: room for 100,000 ranks' files
_CHUNK = 1 << 20


class UntrustedCheckpoint(ValueError):
    """A checkpoint folder that fails its checksum manifest or names a forbidden class; one line."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _payload_files(folder: Path) -> dict[str, Path]:
    """Every file under `folder` except the manifest itself, by its path relative to the folder."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            raise UntrustedCheckpoint(f"{folder}: {rel} is a symbolic link; a checkpoint holds plain files only")
        if path.is_file() and rel != CHECKSUMS:
            files[rel] = path
    return files


def write_checksums(folder: Path) -> Path:
    """Hash every file of the (complete, not yet committed) checkpoint folder into its manifest."""
    files = {rel: _sha256(path) for rel, path in _payload_files(folder).items()}
    text = json.dumps({"algorithm": "sha256", "files": files}, indent=1, sort_keys=True) + "\n"
    atomic_write_text(folder / CHECKSUMS, text)
    return folder / CHECKSUMS


def verify_checkpoint(folder: Path) -> None:
    """Raise UntrustedCheckpoint unless every file of `folder` is exactly what its manifest lists."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UntrustedCheckpoint(f"{folder}: not a checkpoint folder")
    manifest = folder / CHECKSUMS
    if not manifest.is_file():
        raise UntrustedCheckpoint(
            f"{folder}: no {CHECKSUMS}, so its files cannot be checked before loading; "
            "refusing it (checkpoints written by this trainer carry one)"
        )
    try:
        listed = read_json_bounded(manifest, MAX_MANIFEST_BYTES)["files"]  # a sparse 3 GiB one took 3.3 GiB, 30 s
        if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
            raise TypeError
    except OSError as err:  # a FIFO, or larger than any manifest: refused unread
        raise UntrustedCheckpoint(f"{manifest}: not a checksum manifest ({err})") from None
    except (ValueError, KeyError, TypeError):
        raise UntrustedCheckpoint(f"{manifest}: not a checksum manifest") from None
    present = _payload_files(folder)
    for rel in sorted(set(present) - set(listed)):
        raise UntrustedCheckpoint(f"{folder}: {rel} is not in {CHECKSUMS}")
    for rel in sorted(set(listed) - set(present)):
        raise UntrustedCheckpoint(f"{folder}: {rel} is listed in {CHECKSUMS} but missing")
    for rel, path in present.items():
        if _sha256(path) != listed[rel]:
            raise UntrustedCheckpoint(f"{folder}: {rel} does not match its sha256 in {CHECKSUMS}")


def _allowed(module: str, name: str) -> bool:
    """The globals a DCP `.metadata` pickle legitimately names (checked on torch 2.13's writer)."""
    if module == dcp_metadata.__name__:
        obj = getattr(dcp_metadata, name, None)
        return isinstance(obj, type) and obj.__module__ == module
    if module == "torch":
        return name == "Size" or isinstance(getattr(torch, name, None), torch.dtype)
    return (module, name) in {
        ("torch.serialization", "_get_layout"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("collections", "OrderedDict"),
    }


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, where: Path) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if not _allowed(module, name):
            raise UntrustedCheckpoint(f"{self.where}: names {module}.{name}, which checkpoint metadata never holds")
        return super().find_class(module, name)


class SafeFileSystemReader(FileSystemReader):
    """DCP's file-system reader with `.metadata` unpickled through an allowlist of classes."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        path = Path(self._get_metadata_path(kwargs.get("rank")))
        with path.open("rb") as f:
            try:
                metadata = _MetadataUnpickler(f, path).load()
            except UntrustedCheckpoint:
                raise
            except Exception as err:  # any unpickling failure: a corrupt or foreign file
                raise UntrustedCheckpoint(f"{path}: unreadable checkpoint metadata ({type(err).__name__})") from None
        if not isinstance(metadata, dcp_metadata.Metadata):
            raise UntrustedCheckpoint(f"{path}: holds {type(metadata).__name__}, not checkpoint metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def trusted_reader(folder: Path) -> SafeFileSystemReader:
    """Verify `folder` against its manifest and vet its `.metadata`, then return the reader to load it with.

    The metadata is read once here so that a refusal surfaces as UntrustedCheckpoint, not wrapped in
    DCP's CheckpointException from inside `dcp.load`."""
    verify_checkpoint(folder)
    reader = SafeFileSystemReader(folder)
    reader.read_metadata()
    return reader
