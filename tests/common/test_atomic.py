"""Atomic local writes (common/atomic.py): a store's local twins are renamed whole but not synced to disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.atomic import atomic_open, atomic_write_bytes, store_twins


def test_only_files_under_a_store_twin_folder_skip_the_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, recorded: which files were synced
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    twin, other = tmp_path / "mixture", tmp_path / "mixture-local"  # a sibling whose name extends the twin's
    with store_twins(twin):
        with atomic_open(twin / "shard_00000.ds") as out:
            out.write(b"tokens")
        atomic_write_bytes(twin / "sub" / "manifest.json", b"{}")
        atomic_write_bytes(other / "manifest.json", b"{}")
    atomic_write_bytes(twin / "after.json", b"{}")
    assert (twin / "shard_00000.ds").read_bytes() == b"tokens"
    assert (twin / "sub" / "manifest.json").read_bytes() == b"{}"
    assert [Path(p).parent for p in synced] == [other, twin]  # the sibling, and the twin once the block is over
    assert sorted(p.name for p in twin.rglob("*")) == ["after.json", "manifest.json", "shard_00000.ds", "sub"]
