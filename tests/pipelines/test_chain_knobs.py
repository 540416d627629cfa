"""`pipelines.run --train --model --vocab-size --nproc --seq-len`: the flags reach the chain, bad ones are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mixtures.manifest import Manifest, ShardFile, TokenizerInfo
from pipelines.chain import CHAIN_RECORD, ChainConfig, check_chain_record, held_out_files
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


def _manifest(*file_tokens: int) -> Manifest:
    files = [ShardFile(f"s_{i}.ds", tokens, 1, "0" * 64) for i, tokens in enumerate(file_tokens)]
    tok = TokenizerInfo("0" * 64, 4096, None, 0, "tok")
    return Manifest(tok, "uint16", 2, 256, 0, files, {}, sum(file_tokens), sum(file_tokens))


def test_the_held_out_file_is_kept_only_when_the_mixture_can_spare_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The chain's shard arithmetic, from the mixture's token counts (known after curation), before torchrun:
    the run of issue 31 (one shard file) trains without a held-out file instead of failing inside the trainer."""
    knobs = ChainConfig(seq_len=256, nproc=2, micro_batch=8)  # a global batch: 16 windows of 257 tokens
    assert held_out_files(_manifest(20_000, 20_000, 20_000), knobs) == 1
    assert capsys.readouterr().out == ""
    assert held_out_files(_manifest(19_000), knobs) == 0  # "cannot hold out 1 of 1 shard files" before
    assert "validation: none: the mixture's 19000 tokens in 1 shard file(s) cannot spare" in capsys.readouterr().out
    assert held_out_files(_manifest(20_000, 1_000), knobs) == 0  # the last file holds no micro-batch per rank
    with pytest.raises(ExecutorError, match=r"4000 tokens make 15 training windows of 257 tokens, fewer than one "
                                            r"global batch \(2 ranks x 8\)"):  # fmt: skip
        held_out_files(_manifest(4_000), knobs)
