"""The synthetic trainer inputs of tests/support are what the other rooms expect."""

from __future__ import annotations

from pathlib import Path

from mixtures.manifest import read_manifest
from tests.support.trainer_inputs import synthetic_run_inputs


def test_fixture_shards_pass_mixtures_verification(tmp_path: Path) -> None:
    shards, _ = synthetic_run_inputs(tmp_path)
    manifest = read_manifest(shards, verify=True)
    assert manifest.total_tokens == sum(f.tokens for f in manifest.files) > 0


def test_fixture_shards_read_back_by_datatrove(tmp_path: Path) -> None:
    from datatrove.utils.dataset import DatatroveFolderDataset

    shards, _ = synthetic_run_inputs(tmp_path)
    ds = DatatroveFolderDataset(str(shards), seq_len=32, token_size=2, return_positions=True)
    item = ds[0]
    assert item["input_ids"].shape == (33,)
    assert int(item["positions"][0]) == 0
