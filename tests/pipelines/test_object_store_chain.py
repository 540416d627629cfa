"""``python -m pipelines.run sample --train --out s3://...`` against a real S3 server (moto on 127.0.0.1, real
s3fs): tokenizer, mixture shards + manifest, committed checkpoints, the HF export and the final evaluation all
in the bucket; the tokenizer and the shards byte for byte what the chain builds from a local run's documents;
no lock or staged object left visible, and the node's scratch emptied."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import fsspec
import pytest

from mixtures.build import build_mixture
from mixtures.manifest import read_manifest
from pipelines.chain import ChainConfig, mixture_spec
from tests.pipelines.test_object_store_run import run_pipeline
from tests.support.run_compare import local_sample  # noqa: F401
from tests.support.s3_server import s3, s3_server_session  # noqa: F401
from tokenizer.train import train_tokenizer


@pytest.mark.e2e
def test_sample_with_train_to_s3_puts_every_step_in_the_bucket(
    local_sample: Path,  # noqa: F811
    s3,  # noqa: F811
    tmp_path: Path,
) -> None:
    bucket = s3.make_bucket("chain")
    root = Path(tempfile.mkdtemp(prefix="s3chain-", dir="/tmp"))  # short: the worker pool's sockets live there
    try:
        (root / "cwd").mkdir()
        (root / "scratch").mkdir()
        proc = run_pipeline(s3, f"{bucket}/run", root / "cwd", "--train", "--scratch", str(root / "scratch"))
        assert proc.returncode == 0, proc.stderr[-5000:]
        assert "Hugging Face checkpoint: s3://chain/run/sample/train/hf" in proc.stdout, proc.stdout[-3000:]
        assert list((root / "scratch").iterdir()) == []  # staging (documents, tokenizer, mixture, trainer) removed
        assert list((root / "cwd").iterdir()) == []
    finally:
        shutil.rmtree(root)

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    run = "chain/run/sample"
    listing = fs.find(run)
    assert not [p for p in listing if Path(p).name == ".lock" or p.endswith(".tmp")], listing
    # the same tokenizer and shards as the chain's steps on the local run's documents
    config = ChainConfig()
    tok = tmp_path / "tokenizer"
    train_tokenizer([str(local_sample)], tok, vocab_size=config.vocab_size, progress=False)
    assert fs.cat_file(f"{run}/tokenizer/tokenizer.json") == (tok / "tokenizer.json").read_bytes()
    local_mix = build_mixture(mixture_spec(local_sample, tok, config), tmp_path / "mixture", overwrite=True)
    store_mix = json.loads(fs.cat_file(f"{run}/mixture/manifest.json"))
    assert [f["sha256"] for f in store_mix["files"]] == [f.sha256 for f in local_mix.files]
    fs.get(f"{run}/mixture/", str(tmp_path / "fetched") + "/", recursive=True)
    read_manifest(tmp_path / "fetched", verify=True)  # every shard in the bucket matches its manifest's sha256
    # checkpoints committed by their manifest; the export, metrics and evaluation next to them
    steps = {Path(p).parent.name for p in listing if "/train/checkpoints/" in p}
    assert steps and all(f"{run}/train/checkpoints/{s}/checksums.json" in listing for s in steps)
    for name in ("hf/config.json", "hf/model.safetensors", "hf/tokenizer.json", "metrics.jsonl", "eval.json"):
        assert f"{run}/train/{name}" in listing, name
    losses = [json.loads(line) for line in fs.cat_file(f"{run}/train/metrics.jsonl").decode().splitlines()]
    assert [r for r in losses if "loss" in r]
    report = json.loads(fs.cat_file(f"{run}/report/report.json"))
    assert report["evaluation"] is not None
