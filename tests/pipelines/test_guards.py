"""Guards of the pipelines CLIs: a crawled page cannot drive the terminal, and a run folder has one writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.lock import FolderLock
from pipelines.inspect import format_document, printable
from pipelines.report.data import DocSet
from tests.support.cli import run_cli

HOSTILE = "https://evil.example/\x1b]0;owned\x07\x1b[2J"


def test_control_characters_are_shown_not_sent() -> None:
    assert printable("a\x1b[31mb\x07\nc\x9b") == "a\\x1b[31mb\\x07\nc\\x9b"
    docset = DocSet(key="url", label="url", files=[])
    row = {"url": HOSTILE, "text": "body \x1b[5m blink", "filter_reason": "x\x1b"}
    block = format_document(docset, row, None, 200, 80)
    assert "\x1b" not in block and "\x07" not in block
    assert "\\x1b]0;owned\\x07" in block


@pytest.mark.e2e
def test_a_second_run_on_a_locked_folder_is_refused(tmp_path: Path) -> None:
    with FolderLock(tmp_path / "sample", "pipelines.run"):
        proc = run_cli("pipelines.run", "sample", "--out", str(tmp_path), "--no-dedup", check=False, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "lock" in lines[0].lower(), proc.stderr
    assert not (tmp_path / "sample" / "run.json").exists()
