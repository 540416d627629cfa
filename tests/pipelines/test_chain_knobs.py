"""`pipelines.run --train --model --vocab-size --nproc --seq-len`: the flags reach the chain, bad ones are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.chain import CHAIN_RECORD, ChainConfig, check_chain_record
from pipelines.errors import ExecutorError
from pipelines.run import build_parser


def test_the_flags_default_to_the_quickstart_chain() -> None:
    args = build_parser().parse_args(["sample", "--train"])
    knobs = ChainConfig(vocab_size=args.vocab_size, seq_len=args.seq_len, model=args.model, nproc=args.nproc)
    assert knobs == ChainConfig()
    args = build_parser().parse_args(["sample", "--train", "--model", "m.yaml", "--vocab-size", "512"])
    assert (args.model, args.vocab_size) == ("m.yaml", 512)
    assert build_parser().parse_args(["sample", "--train", "--eval-blimp", "b.jsonl"]).eval_blimp == Path("b.jsonl")


@pytest.mark.parametrize(("field", "value"), [("vocab_size", 100), ("nproc", 0), ("seq_len", 0)])
def test_bad_knobs_are_one_line_errors(field: str, value: int) -> None:
    with pytest.raises(ExecutorError, match=field.replace("_", ".")):
        ChainConfig(**{field: value})  # type: ignore[arg-type]


def test_a_rerun_with_other_knobs_is_refused(tmp_path: Path) -> None:
    check_chain_record(tmp_path, ChainConfig())
    assert (tmp_path / CHAIN_RECORD).is_file()
    check_chain_record(tmp_path, ChainConfig())  # the same chain resumes
    with pytest.raises(ExecutorError, match=r"other settings \(nproc, vocab_size\)"):
        check_chain_record(tmp_path, ChainConfig(vocab_size=512, nproc=1))
