"""A checkpoint is checked before any of it is unpickled; configuration errors end a run in one line.

The planted `.metadata` is a real pickle whose `__reduce__` would write a marker file: the tests
load it through the two ways a checkpoint comes in (`python -m trainer.export_hf`, `--resume`) and
assert the marker never appears, both when the checksum manifest catches the swap and when the
manifest was forged to match (then the restricted unpickler refuses it).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO
from tests.support.trainer_inputs import synthetic_run_inputs
from trainer.checkpoint_trust import CHECKSUMS, UntrustedCheckpoint, verify_checkpoint, write_checksums
from trainer.fsdp_train import TrainConfig, train
from trainer.optim import OptimConfig


class _WritesMarker:
    """Unpickling this runs `open(marker, 'w').write('pwned')` (what a hostile `.metadata` would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckguard")
    shards, tok = synthetic_run_inputs(root, vocab=96, n_docs=40, seq_len=32)
    cfg = TrainConfig(
        shards=shards, tokenizer=tok, out=root / "train", micro_batch=4, optim=OptimConfig(lr=3e-3),
        max_steps=2, export_hf=False, verify_shards=False,
    )  # fmt: skip
    train(cfg)
    ckpt = sorted((root / "train" / "checkpoints").glob("step_*"))[-1]
    return {"root": root, "shards": shards, "tok": tok, "ckpt": ckpt}


def _planted(run: dict[str, Path], tmp_path: Path, forge_manifest: bool) -> tuple[Path, Path]:
    """A copy of the run's output with a hostile `.metadata` in its latest checkpoint; (out dir, marker)."""
    out = tmp_path / "train"
    shutil.copytree(run["root"] / "train", out)
    ckpt = sorted((out / "checkpoints").glob("step_*"))[-1]
    marker = tmp_path / "MARKER"
    (ckpt / ".metadata").write_bytes(pickle.dumps(_WritesMarker(marker)))
    if forge_manifest:
        write_checksums(ckpt)
    return out, marker


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_every_committed_checkpoint_carries_a_manifest_that_verifies(run: dict[str, Path]) -> None:
    listed = json.loads((run["ckpt"] / CHECKSUMS).read_text())["files"]
    assert ".metadata" in listed and "trainer_state.json" in listed
    assert any(name.endswith(".distcp") for name in listed)
    verify_checkpoint(run["ckpt"])


@pytest.mark.parametrize("damage", ["no_manifest", "flipped_byte", "extra_file", "missing_file", "bad_manifest"])
def test_a_damaged_checkpoint_is_refused_in_one_line(run: dict[str, Path], tmp_path: Path, damage: str) -> None:
    ckpt = tmp_path / run["ckpt"].name
    shutil.copytree(run["ckpt"], ckpt)
    shard = next(ckpt.glob("*.distcp"))
    if damage == "no_manifest":
        (ckpt / CHECKSUMS).unlink()
    elif damage == "flipped_byte":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x01
        shard.write_bytes(bytes(data))
    elif damage == "extra_file":
        (ckpt / "__9_0.distcp").write_bytes(b"x")
    elif damage == "missing_file":
        shard.unlink()
    else:
        (ckpt / CHECKSUMS).write_text("[1, 2]")
    with pytest.raises(UntrustedCheckpoint) as err:
        verify_checkpoint(ckpt)
    assert "\n" not in str(err.value)


@pytest.mark.e2e
@pytest.mark.parametrize("way_in", ["export_hf", "resume"])
@pytest.mark.parametrize("forge_manifest", [False, True], ids=["manifest_mismatch", "forged_manifest"])
def test_a_planted_metadata_is_refused_before_unpickling(
    run: dict[str, Path], tmp_path: Path, forge_manifest: bool, way_in: str
) -> None:
    out, marker = _planted(run, tmp_path, forge_manifest)
    if way_in == "export_hf":
        ckpt = sorted((out / "checkpoints").glob("step_*"))[-1]
        proc = _python("-m", "trainer.export_hf", "--checkpoint", str(ckpt), "--out", str(tmp_path / "hf"))
    else:
        proc = _python(
            "-m", "trainer.launch", "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py",
            "--shards", str(run["shards"]), "--tokenizer", str(run["tok"]), "--out", str(out),
            "--micro-batch", "2", "--resume", "--max-steps", "3", "--no-export-hf",
        )  # fmt: skip
    _one_error_line(proc, ".metadata")
    assert not marker.exists()
    assert not (tmp_path / "hf").exists()


@pytest.mark.e2e
def test_a_configuration_error_under_torchrun_is_one_line_from_rank0(run: dict[str, Path], tmp_path: Path) -> None:
    """Both ranks refuse (they hold out more files than exist); stock torchrun: one `error:` line and no rank
    traceback (its own ChildFailedError block follows); trainer.launch: that line alone, exit status 2."""
    args = [
        "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py", "--shards", str(run["shards"]),
        "--tokenizer", str(run["tok"]), "--out", str(tmp_path / "out"), "--val-holdout-files", "999",
    ]  # fmt: skip
    stock = _python("-m", "torch.distributed.run", *args)
    assert stock.returncode != 0
    errors = [line for line in stock.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot hold out 999" in errors[0], stock.stderr
    assert "trainer/" not in "".join(line for line in stock.stderr.splitlines() if line.startswith("  File"))
    ours = _python("-m", "trainer.launch", *args)
    line = _one_error_line(ours, "cannot hold out 999")
    assert ours.stderr.strip() == line
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_no_verify_shards_warns(run: dict[str, Path], tmp_path: Path) -> None:
    proc = _python(
        "trainer/fsdp_train.py", "--shards", str(run["shards"]), "--tokenizer", str(run["tok"]),
        "--out", str(tmp_path / "out"), "--no-verify-shards", "--max-steps", "1", "--micro-batch", "2",
        "--no-export-hf",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning: --no-verify-shards" in proc.stderr
