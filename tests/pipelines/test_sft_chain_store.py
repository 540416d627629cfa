"""The chain's SFT stage on a store run directory (moto's S3 server, real s3fs): `run_sft` fine-tunes the
bucket's trained model into the bucket (trainer.sft under torchrun with URL flags), and the run report's
fine-tuning section reads it from there."""

from __future__ import annotations

import fsspec
import pytest

from common.storage import as_path
from pipelines.chain import ChainConfig, run_sft
from pipelines.report.write import fine_tuning_section
from tests.support.s3_server import S3Server, s3, s3_server_session  # noqa: F401
from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl


@pytest.mark.e2e  # one torchrun launch
def test_run_sft_fine_tunes_the_buckets_model_into_the_bucket(s3: S3Server, tmp_path) -> None:  # noqa: F811
    base = tiny_base(tmp_path / "hf", chat_tokenizer_dir(tmp_path / "tok"))
    s3.make_bucket("chain-sft")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(str(base) + "/", "chain-sft/run/train/hf/", recursive=True)
    data = write_jsonl(tmp_path / "conv.jsonl", arithmetic_records(240))  # 200 held out by the chain
    run = as_path("s3://chain-sft/run")
    result = run_sft(run / "train" / "hf", data, run / "sft", ChainConfig(nproc=1, micro_batch=8))
    listing = {p.removeprefix("chain-sft/run/sft/") for p in fs.find("chain-sft/run/sft")}
    assert {"hf/config.json", "hf/model.safetensors", "metrics.jsonl", "run_config.json"} <= listing, listing
    assert not [p for p in listing if p.endswith(".lock")]
    assert result["val_response_loss"][0][0] == 0 and len(result["val_response_loss"]) >= 2
    shown = fine_tuning_section(run)
    assert shown is not None and [list(p) for p in shown["val_response_loss"]] == [
        list(p) for p in result["val_response_loss"]
    ]
