"""Where the shared third-party data lives: ``$CC2MODEL_SHARED_DATA``, else ``../shared/data`` beside the
repository. Tests, benches and the chain's default BLiMP file all look there; the data is never copied
into the project, and whoever reads it copes with its absence."""

from __future__ import annotations

import os
from pathlib import Path


def shared_data_dir() -> Path:
    env = os.environ.get("CC2MODEL_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
