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

from common.lock import FolderUnavailable, check_writable

# multiprocessing's Manager listens on a Unix socket under the temp dir (``<scratch>/cc2model-*/pymp-*/
# listener-*``, ~55 characters below the scratch folder) and a socket path holds at most 107 bytes
MAX_BASE_CHARS = 50


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
    folder = check_writable(base if base is not None else tempfile.gettempdir())
    if len(str(folder)) > MAX_BASE_CHARS:
        raise FolderUnavailable(
            f"scratch folder {folder} is too long a path for the Unix sockets of the worker pool "
            f"({len(str(folder))} > {MAX_BASE_CHARS} characters); give a shorter --scratch (or TMPDIR)"
        )
    return ScratchDir(folder)
