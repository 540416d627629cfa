"""`tokenizer.evaluate --text` takes what `tokenizer.train --input` takes; `--reference` is optional; a bad input is
one `error:` line (exit 2) instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenizer.evaluate import main as evaluate_main


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        evaluate_main(args)
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_run_dir_and_a_quoted_glob_without_a_reference(
    tok4k: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "CC-MAIN-2024-18"  # a run directory: tokenizer.train reads its kept documents
    (run_dir / "curated").mkdir(parents=True)
    texts = [f"Document {i}: the council met on Tuesday to discuss the new library." for i in range(40)]
    pq.write_table(pa.table({"text": texts}), run_dir / "curated" / "00000.parquet")
    code, out, err = _run(["--tokenizer", str(tok4k), "--text", str(run_dir), str(run_dir / "curated" / "*.parquet")],
                          capsys)  # fmt: skip
    assert code == 0, err
    header, by_dir, by_glob = out.strip().splitlines()
    assert by_dir.split()[0] == run_dir.name and by_glob.split()[0] == "*.parquet"
    assert by_dir.split()[1:] == by_glob.split()[1:]  # the same kept documents, measured alike
    assert by_dir.split()[-2:] == ["-", "-"] and int(by_dir.split()[1]) == 40  # no reference: its columns empty


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "missing.txt", "no such file or directory"),
        (lambda d: d / "nothing-*.parquet", "no parquet files there"),
        (lambda d: (d / "bad.txt").write_bytes(b"\xff\xfe not utf-8") and d / "bad.txt", "can't decode byte 0xff"),
        (lambda d: (d / "bad.jsonl").write_text("{not json\n") and d / "bad.jsonl", "bad.jsonl: Expecting property"),
    ],
    ids=["missing file", "glob without matches", "not UTF-8", "bad JSON"],
)
def test_a_bad_input_is_one_line(
    tok4k: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, expected: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    code, out, err = _run(["--tokenizer", str(tok4k), "--text", str(path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: --text "), err
    assert expected in err, err


def test_a_reference_that_is_no_tokenizer_is_one_line(
    tok4k: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "doc.txt").write_text("some text\n")
    (tmp_path / "ref.json").write_text("[]")
    code, _, err = _run(["--tokenizer", str(tok4k), "--reference", str(tmp_path / "ref.json"), "--text",
                         str(tmp_path / "doc.txt")], capsys)  # fmt: skip
    assert code == 2 and err.startswith("error: --reference ") and "not a tokenizer" in err, err
