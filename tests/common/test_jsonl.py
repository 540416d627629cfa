"""``common.jsonl.iter_jsonl``: line numbers, blank lines, gzip by suffix, one error naming file:line."""

from __future__ import annotations

import gzip

import pytest

from common.jsonl import JsonlError, iter_jsonl
from evals.tasks.base import TaskDataError
from filters.eval_sets import EvalSetError, load_eval_set

LINES = '{"text": "a"}\n\n   \n["b"]\n7\n'


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.jsonl.gz"])
def test_rows_with_their_line_numbers_blank_lines_skipped(tmp_path, name) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(LINES.encode()) if name.endswith(".gz") else LINES.encode())
    assert list(iter_jsonl(path)) == [(1, {"text": "a"}), (4, ["b"]), (5, 7)]


def test_a_bad_line_names_file_and_line_in_the_callers_error_type(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": \n')
    with pytest.raises(JsonlError, match=rf"^{path}:3: not JSON \("):
        list(iter_jsonl(path))
    with pytest.raises(TaskDataError, match=rf"^{path}:3: not JSON"):
        list(iter_jsonl(path, TaskDataError))


def test_undecodable_and_broken_gzip_are_one_line_errors(tmp_path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"text": "a"}\n{"text": "\xe9"}\n')
    with pytest.raises(JsonlError, match=rf"^{latin}:2: not UTF-8"):
        list(iter_jsonl(latin))
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"text": "a"}\n' * 1000)[:-20])
    with pytest.raises(JsonlError, match=rf"^{broken}:\d+: unreadable"):
        list(iter_jsonl(broken))


def test_readers_of_the_rooms_report_the_line(tmp_path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(EvalSetError, match=rf"{path}:2: not JSON"):
        load_eval_set(path)


def test_a_byte_order_mark_is_read_and_deep_nesting_is_one_line(tmp_path) -> None:
    """A file saved with a UTF-8 byte order mark (a valid encoding, Windows editors write it) was refused as
    "Unexpected UTF-8 BOM"; a line of 100,000 nested `[` was a RecursionError traceback in every reader."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + LINES.encode())
    assert list(iter_jsonl(path)) == [(1, {"text": "a"}), (4, ["b"]), (5, 7)]
    path.write_text('{"text": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TaskDataError, match=rf"^{path}:2: JSON nested too deeply"):
        list(iter_jsonl(path, TaskDataError))
