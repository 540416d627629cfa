"""A mixture a training run reads is protected: `mixtures.build --overwrite` of it is refused in one line
(the audit's overwrite deleted the shards under a live run, which died), and the read lock goes with the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from common.lock import FolderLock, FolderLocked, FolderReadLock, FolderUnavailable
from tests.support.cli import REPO, run_cli
from tests.support.processes import kill_all
from tests.support.trainer_inputs import synthetic_run_inputs


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], needle: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def test_readers_share_and_exclude_writers(tmp_path: Path) -> None:
    folder = tmp_path / "mix"
    folder.mkdir()
    first, second = FolderReadLock(folder, "training run"), FolderReadLock(folder, "training run")
    assert first.acquire() and second.acquire()  # two runs may train on one mixture
    with pytest.raises(FolderLocked, match=rf"being read by a training run \(pid {os.getpid()}"):
        FolderLock(folder, "mixture build").acquire()
    first.release()
    with pytest.raises(FolderLocked, match="being read by a training run"):
        FolderLock(folder, "mixture build").acquire()
    second.release()
    with FolderLock(folder, "mixture build"):  # the last reader gone, a build may write
        with pytest.raises(FolderLocked, match=r"being written by a mixture build \(pid"):
            FolderReadLock(folder, "training run").acquire()
    assert FolderReadLock(tmp_path / "absent").acquire() is False  # the reader's own checks name it
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / ".lock").symlink_to(tmp_path / "victim")
    with pytest.raises(FolderUnavailable, match="cannot lock"):
        FolderReadLock(planted).acquire()
    assert not (tmp_path / "victim").exists()


def _spec(tmp: Path, tok: Path) -> Path:
    docs = tmp / "docs"
    docs.mkdir()
    rows = [{"id": str(i), "text": " ".join(f"w{(i * 7 + j) % 90 + 1}" for j in range(40))} for i in range(50)]
    pq.write_table(pa.Table.from_pylist(rows), docs / "part_00000.parquet")
    spec = {"tokenizer": str(tok), "target_tokens": "epoch", "seq_len": 32, "seed": 1, "workers": 1,
            "sources": [{"name": "web", "path": str(docs), "weight": 1}]}  # fmt: skip
    path = tmp / "mix.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.e2e
def test_overwrite_of_a_mixture_in_training_is_refused(tmp_path: Path) -> None:
    shards, tok = synthetic_run_inputs(tmp_path / "inputs", vocab=96, n_docs=2000, seq_len=32)
    before = {p.name: p.read_bytes() for p in shards.iterdir()}
    spec = _spec(tmp_path, tok)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    flags = ["--shards", str(shards), "--tokenizer", str(tok), "--out", str(tmp_path / "train"), "--micro-batch", "2",
             "--log-every", "1", "--no-export-hf", "--device", "cpu"]  # fmt: skip
    trainer = subprocess.Popen([sys.executable, "-m", "trainer.fsdp_train", *flags], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        metrics, deadline = tmp_path / "train" / "metrics.jsonl", time.monotonic() + 180
        while trainer.poll() is None and not metrics.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert trainer.poll() is None, trainer.stderr.read()[-3000:] if trainer.stderr else ""
        proc = run_cli("mixtures.build", str(spec), "--out", str(shards), "--overwrite", "--quiet", check=False)
        line = _one_line_exit_2(proc, f"being read by a training run (pid {trainer.pid}")
        print(line)
        assert trainer.poll() is None, "the training run died"
        assert {p.name: p.read_bytes() for p in shards.iterdir() if p.name != ".lock"} == before
    finally:
        kill_all({trainer.pid})
        trainer.wait(timeout=30)
    run_cli("mixtures.build", str(spec), "--out", str(shards), "--overwrite", "--quiet")  # the lock went with it
    assert (shards / "manifest.json").read_bytes() != before["manifest.json"]
