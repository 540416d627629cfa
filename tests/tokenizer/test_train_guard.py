"""`python -m tokenizer.train` on bad input: one line on stderr, exit status 2, no output folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tokenizer.train import MIN_VOCAB, check_sizes


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--input", "/nonexistent"], "/nonexistent"),
        (["--vocab-size", "0"], "--vocab-size"),
        (["--vocab-size", "-5"], "--vocab-size"),
        (["--vocab-size", str(MIN_VOCAB - 1)], "--vocab-size"),
        (["--vocab-size", str(1 << 33)], "--vocab-size"),
        (["--char-budget", "0"], "--char-budget"),
        (["--doc-char-cap", "-1"], "--doc-char-cap"),
        (["--min-frequency", "0"], "--min-frequency"),
        (["--max-digits", "-2"], "max-digits"),
    ],
)
@pytest.mark.e2e
def test_bad_flags_are_one_line_and_write_nothing(run_dir: Path, tmp_path: Path, flags: list[str], needle: str) -> None:
    args = ["--input", str(run_dir), *flags] if flags[0] != "--input" else flags
    out = tmp_path / "tok"
    proc = run_cli("tokenizer.train", *args, "--out", str(out), "--quiet", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not out.exists()


def test_the_smallest_vocab_that_learns_a_merge_is_accepted() -> None:
    check_sizes(MIN_VOCAB, 1, 1, None, 1)
    with pytest.raises(ValueError, match="got 257"):
        check_sizes(257, 1, 1, None, 1)
