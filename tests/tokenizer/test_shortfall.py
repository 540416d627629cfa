"""A tokenizer smaller than the `--vocab-size` asked for is reported, not passed over in silence."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.cli import run_cli


def test_a_vocab_short_of_the_request_is_one_warning_line(tmp_path: Path) -> None:
    texts = [f"the cat {i} sat on the mat near the door of house {i % 7}" for i in range(200)]
    (tmp_path / "docs").mkdir()  # the output folder apart from the input (one inside it is refused)
    pq.write_table(pa.table({"text": texts}), tmp_path / "docs" / "docs.parquet")
    proc = run_cli("tokenizer.train", "--input", str(tmp_path / "docs"), "--out", str(tmp_path / "tok"),
                   "--vocab-size", "4096", "--quiet")  # fmt: skip
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and " of the 4096 asked: the " in warning[0], proc.stderr
    got = int(warning[0].split()[2])
    assert 257 < got < 4096 and f"(vocab {got}," in proc.stdout
