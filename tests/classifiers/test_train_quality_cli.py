"""The quality-classifier CLI maps its flags onto ``TrainConfig`` through ``common.config.config_from_args``."""

from __future__ import annotations

import argparse

import pytest

from classifiers.train_quality import TrainConfig, build_parser
from common.config import config_from_args

REQUIRED = ["--positive", "p.parquet", "--negative", "n.parquet", "--out", "model.bin"]


def test_no_flags_give_the_config_defaults() -> None:
    assert config_from_args(TrainConfig, build_parser().parse_args(REQUIRED)) == TrainConfig()


def test_flags_land_on_their_fields_and_lists_become_tuples() -> None:
    flags = ["--dim", "12", "--word-ngrams", "3", "--quantize", "--top-fraction", "0.2", "0.4"]
    config = config_from_args(TrainConfig, build_parser().parse_args(REQUIRED + flags))
    assert (config.dim, config.word_ngrams, config.quantize) == (12, 3, True)
    assert config.top_fractions == (0.2, 0.4)
    assert config.quantize_cutoff == TrainConfig.quantize_cutoff  # no flag: the default stays


def test_overrides_win_and_other_attributes_are_ignored() -> None:
    namespace = argparse.Namespace(dim=8, threads=4, out="somewhere", data="elsewhere")
    config = config_from_args(TrainConfig, namespace, threads=1)
    assert (config.dim, config.threads) == (8, 1)


def test_word_ngrams_need_hash_rows() -> None:
    """`--bucket 0 --word-ngrams 2` killed fastText's process (BrokenProcessPool); with unigrams no row is needed."""
    with pytest.raises(ValueError, match="--bucket must be >= 1 with --word-ngrams 2"):
        TrainConfig(bucket=0, word_ngrams=2).check()
    TrainConfig(bucket=0, word_ngrams=1).check()
