"""SFT on object storage (moto's S3 server on 127.0.0.1, real s3fs): the base model, the conversations and
--out as s3:// URLs; the run stopped and resumed from the bucket is the local run bit for bit, its export and
records land in the bucket, a checkpoint it committed there is a base in turn; bad stores are one line."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from common.object_lock import ObjectLock
from tests.support.s3_server import S3Server, s3, s3_server_session  # noqa: F401
from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl
from trainer.optim import OptimConfig
from trainer.sft import SFTConfig, main, sft
from trainer.store import StoreCheckpoints

BUCKET = "sft-store"


def _cfg(base: Path | str, data: Path | str, out: Path | str, scratch: Path, **kw: object) -> SFTConfig:
    optim = OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=2)
    fields = dict(micro_batch=2, grad_accum=2, seq_len=127, bf16=False, log_every=1, val_holdout=8, eval_every=3,
                  export_hf=False, device="cpu", scratch=scratch)  # fmt: skip
    return SFTConfig(base, data, out, optim=optim, **{**fields, **kw})  # type: ignore[arg-type]


def _inputs(server: S3Server, root: Path) -> tuple[Path, Path]:
    """A tiny HF base and conversations, locally and in the bucket (the base as a trainer --out's hf/)."""
    base = tiny_base(root / "base", chat_tokenizer_dir(root / "tok"))
    data = write_jsonl(root / "train.jsonl", arithmetic_records(40))
    server.make_bucket(BUCKET)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.put(str(base) + "/", f"{BUCKET}/pre/hf/", recursive=True)
    fs.put_file(str(data), f"{BUCKET}/data/train.jsonl")
    return base, data


@pytest.mark.e2e  # four short runs
def test_sft_on_the_store_resumes_to_the_local_losses_and_exports_there(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    base, data = _inputs(s3, tmp_path / "inputs")
    scratch = tmp_path / "scratch"
    straight = sft(_cfg(base, data, tmp_path / "local", scratch))
    n = straight.steps_done
    out, data_url = f"s3://{BUCKET}/sft", f"s3://{BUCKET}/data/train.jsonl"
    cut = sft(_cfg(f"s3://{BUCKET}/pre", data_url, out, scratch, max_steps=3, checkpoint_every=3))
    assert cut.steps_done == 3 and StoreCheckpoints(f"{out}/checkpoints").committed() == ["step_000000003"]
    resumed = sft(_cfg(f"s3://{BUCKET}/pre", data_url, out, scratch, resume=True, export_hf=True))
    assert dict(cut.losses) | dict(resumed.losses) == dict(straight.losses)  # bit-identical
    assert dict(resumed.val_losses)[n] == dict(straight.val_losses)[n]
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    records = [json.loads(x) for x in fs.cat_file(f"{BUCKET}/sft/metrics.jsonl").decode().splitlines()]
    assert sorted(r["step"] for r in records if "loss" in r) == list(range(1, n + 1))
    exported = {Path(p).name for p in fs.find(f"{BUCKET}/sft/hf")}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= exported
    record = json.loads(fs.cat_file(f"{BUCKET}/sft/run_config.json"))  # names the URLs, not scratch copies
    assert record["base"] == f"s3://{BUCKET}/pre/hf" and record["sft_config"]["data"] == data_url
    assert record["tokenizer"]["path"] == f"s3://{BUCKET}/pre/hf/tokenizer.json"
    assert list(scratch.iterdir()) == []  # the staging folders went with the runs
    # the checkpoint committed in the bucket is a base in turn (its trainer state names the tokenizer's URL)
    step = StoreCheckpoints(f"{out}/checkpoints").committed()[-1]
    again = sft(_cfg(f"{out}/checkpoints/{step}", data_url, f"s3://{BUCKET}/again", scratch, max_steps=1))
    assert again.steps_done == 1
    assert json.loads(fs.cat_file(f"{BUCKET}/again/run_config.json"))["init_from"]["kind"] == "checkpoint"


def test_sft_store_flags_are_checked_before_any_work(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, data = _inputs(s3, tmp_path / "inputs")
    scratch = tmp_path / "scratch"
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.pipe_file(f"{BUCKET}/old/metrics.jsonl", b'{"step": 1, "loss": 1.0}\n')
    cases = [
        (["--base", str(base), "--data", str(data), "--out", "s3://no-such-bucket/sft"], "does not exist"),
        (["--base", f"s3://{BUCKET}/nothing", "--data", str(data), "--out", str(tmp_path / "out")], "no such folder"),
        (["--base", str(base), "--data", f"s3://{BUCKET}/data/none.jsonl", "--out", str(tmp_path / "out")],
         "no such folder"),
        (["--base", str(base), "--data", str(data), "--out", f"s3://{BUCKET}/old"], "pass --resume to continue it, "),
        (["--base", str(base), "--data", str(data), "--out", "nosuch://x/sft"], "unknown storage scheme"),
    ]  # fmt: skip
    busy = ["--base", str(base), "--data", str(data), "--out", f"s3://{BUCKET}/busy"]
    with ObjectLock(f"s3://{BUCKET}/busy", "fine-tuning run"):  # another run writes there
        before = sorted(fs.find(BUCKET))
        cases.append((busy, "being written by another fine-tuning run"))
        for argv, message in cases:
            with pytest.raises(SystemExit) as exit_info:
                main([*argv, "--device", "cpu", "--scratch", str(scratch)])
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err
        assert sorted(fs.find(BUCKET)) == before  # nothing written to the bucket
    assert not (tmp_path / "out").exists() and (not scratch.exists() or list(scratch.iterdir()) == [])
