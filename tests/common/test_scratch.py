"""``--scratch DIR``: a run's temp files go to a fresh folder inside it, removed at the end; a path too long
for the worker pool's Unix sockets is refused before any work."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from common.lock import FolderUnavailable
from common.scratch import MAX_BASE_CHARS, scratch_dir


def test_temp_files_go_to_the_scratch_and_are_removed() -> None:
    base = Path(tempfile.mkdtemp(prefix="scr-", dir="/tmp"))
    try:
        before_env = os.environ.get("TMPDIR")
        with scratch_dir(base) as folder:
            assert folder.parent == base and os.environ["TMPDIR"] == str(folder)
            with tempfile.NamedTemporaryFile() as handle:
                assert Path(handle.name).parent == folder
            (folder / "left-behind").write_text("x")
        assert list(base.iterdir()) == []
        assert os.environ.get("TMPDIR") == before_env and tempfile.gettempdir() != str(folder)
    finally:
        base.rmdir()


def test_a_scratch_path_too_long_for_unix_sockets_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * MAX_BASE_CHARS)
    with pytest.raises(FolderUnavailable, match="too long a path"):
        scratch_dir(deep)
    assert not deep.exists()
