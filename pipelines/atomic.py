"""Atomic small-file writes for the run directory (``run.json``, ``stats.json``, the report)."""

from __future__ import annotations

from pathlib import Path

from mixtures.atomic import atomic_write_bytes


def atomic_write_text(path: Path, text: str) -> None:
    """Temp file beside ``path``, fsync, rename (one implementation: ``mixtures.atomic``)."""
    atomic_write_bytes(path, text.encode("utf-8"))
