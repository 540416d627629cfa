"""A node's local scratch space: where a run's temporary files go when its outputs live in an object store.

Uploads staged by ``common.atomic``, datatrove's and the sandboxes' temp files all go through ``tempfile``;
``ScratchDir`` points ``tempfile`` (and ``TMPDIR``, for forked workers and child processes) at a fresh folder
inside ``--scratch DIR`` (default: the system temp dir) for the length of the run and removes it at the end,
so a node writes nothing outside its scratch and the store, and needs no disk shared with other nodes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from common.lock import check_writable


class ScratchDir:
    """``with ScratchDir(base):`` temp files go to a new folder under ``base``, removed on exit."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.path: Path | None = None
        self._saved: tuple[str | None, str | None] = (None, None)

    def __enter__(self) -> Path:
        self.base.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix="cc2model-", dir=self.base))
        self._saved = (tempfile.tempdir, os.environ.get("TMPDIR"))
        tempfile.tempdir = str(self.path)
        os.environ["TMPDIR"] = str(self.path)
        return self.path

    def __exit__(self, *exc: object) -> None:
        tempdir, env = self._saved
        tempfile.tempdir = tempdir
        if env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = env
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def scratch_dir(base: str | os.PathLike[str] | None) -> ScratchDir:
    """The run's scratch under ``base`` (None: the system temp dir), checked writable now, before any work
    (a ``FolderUnavailable`` line otherwise)."""
    return ScratchDir(check_writable(base if base is not None else tempfile.gettempdir()))
