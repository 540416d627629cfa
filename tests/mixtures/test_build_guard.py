"""`mixtures.build` on bad input (one line, exit 2, nothing written), killed builds, and its folder lock."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.lock import FolderLock, FolderLocked
from mixtures.build import build_mixture
from mixtures.manifest import read_manifest
from tests.support.cli import REPO, run_cli
from tests.support.text_corpora import is_held_out, web_documents, write_parquet


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("guard-src")
    write_parquet([r for r in web_documents() if not is_held_out(r)][:60], root / "web", n_files=2)
    return root / "web"


def _spec(tok: Path, docs: Path, **extra: Any) -> dict[str, Any]:
    return {
        "tokenizer": str(tok),
        "target_tokens": "epoch",
        "seq_len": 64,
        "seed": 3,
        "workers": 1,
        "tokens_per_file": 4000,
        "sources": [{"name": "web", "path": str(docs), "weight": 1}],
        **extra,
    }


def _write(path: Path, spec: Any) -> Path:
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    return path


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], lines[0]


def _bad_specs(tok: Path, docs: Path, tmp: Path) -> dict[str, tuple[str | dict[str, Any] | None, str]]:
    good = _spec(tok, docs)
    src = good["sources"][0]
    return {  # case: (spec text or dict, None for no file; what the line names)
        "missing_spec": (None, "No such file"),
        "malformed_yaml": ("sources: [ {name: web", "expected"),
        "not_a_mapping": ("- 1\n- 2\n", "mapping"),
        "missing_tokenizer": ({**good, "tokenizer": str(tmp / "none")}, "no tokenizer file"),
        "unknown_key": ({**good, "tokenz": 1}, "unknown spec keys"),
        "negative_weight": ({**good, "sources": [{**src, "weight": -1}]}, "weight"),
        "text_weight": ({**good, "sources": [{**src, "weight": "heavy"}]}, "weight"),
        "missing_source": ({**good, "sources": [{**src, "path": str(tmp / "nothing")}]}, "source 'web'"),
        "bad_seq_len": ({**good, "seq_len": 0}, "seq_len"),
        "impossible_target": ({**good, "target_tokens": 10**9}, "cannot be met"),
    }


@pytest.mark.e2e
@pytest.mark.parametrize(
    "case",
    [
        "missing_spec",
        "malformed_yaml",
        "not_a_mapping",
        "missing_tokenizer",
        "unknown_key",
        "negative_weight",
        "text_weight",
        "missing_source",
        "bad_seq_len",
        "impossible_target",
    ],
)
def test_bad_spec_is_one_line_and_writes_nothing(tok4k: Path, docs: Path, tmp_path: Path, case: str) -> None:
    spec, needle = _bad_specs(tok4k, docs, tmp_path)[case]
    path = tmp_path / "mix.yaml"
    if spec is not None:
        _write(path, spec)
    out = tmp_path / "out"
    _one_line_exit_2(run_cli("mixtures.build", str(path), "--out", str(out), "--quiet", check=False), needle)
    assert not out.exists()


@pytest.mark.e2e
def test_out_holding_other_shards_or_under_a_file_is_one_line(tok4k: Path, docs: Path, tmp_path: Path) -> None:
    spec = _write(tmp_path / "mix.yaml", _spec(tok4k, docs))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "old_00000.ds").write_bytes(b"\0" * 8)
    proc = run_cli("mixtures.build", str(spec), "--out", str(foreign), "--quiet", check=False)
    _one_line_exit_2(proc, "another build")
    assert sorted(p.name for p in foreign.iterdir()) == ["old_00000.ds"]
    (tmp_path / "a_file").write_text("x")
    proc = run_cli("mixtures.build", str(spec), "--out", str(tmp_path / "a_file" / "out"), "--quiet", check=False)
    _one_line_exit_2(proc, "a_file")


def test_a_locked_out_is_refused_naming_the_holder(tok4k: Path, docs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FolderLock(out, "mixture build"):
        with pytest.raises(FolderLocked, match=f"pid {os.getpid()}"):
            build_mixture(_spec(tok4k, docs), out, progress=False)
        proc = run_cli("mixtures.build", str(_write(tmp_path / "m.yaml", _spec(tok4k, docs))), "--out", str(out),
                       "--quiet", check=False)  # fmt: skip
        _one_line_exit_2(proc, "being written by another mixture build")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    build_mixture(_spec(tok4k, docs), out, progress=False)  # the lock went with its holder
    assert read_manifest(out, verify=True).files


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name.startswith("shard_")}


@pytest.mark.e2e
def test_a_killed_build_reruns_to_the_same_shards(tok4k: Path, docs: Path, tmp_path: Path) -> None:
    """SIGKILL at random points of a build (before its marker, while it tokenizes, after its k-th shard):
    the same command again gives the reference build's manifest and shards byte for byte."""
    many = _spec(tok4k, docs, target_tokens=300_000, tokens_per_file=2000)
    many["sources"][0]["max_repetition"] = 50
    spec = _write(tmp_path / "mix.yaml", many)
    reference = build_mixture(spec, tmp_path / "reference", progress=False)
    assert len(reference.files) >= 50
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mixtures.build", str(spec), "--out", str(out), "--quiet"]
    rng = random.Random(19)
    partial = []
    for shards_before_kill in [None, 0, *sorted(rng.sample(range(1, len(reference.files) - 10), 3))]:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if shards_before_kill is None and out.exists():
                break
            if shards_before_kill is not None and (out / ".build.json").exists():
                if len(list(out.glob("shard_*.ds"))) >= shards_before_kill:
                    break
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        partial.append(len(list(out.glob("shard_*.ds"))) if out.exists() else 0)
        assert not (out / "manifest.json").exists(), "the build finished before it was killed"
        rerun = run_cli("mixtures.build", str(spec), "--out", str(out), "--quiet")
        assert "tokens/s" in rerun.stdout
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest == json.loads((tmp_path / "reference" / "manifest.json").read_text())
        assert _shard_bytes(out) == _shard_bytes(tmp_path / "reference")
        assert not (out / ".build.json").exists() and not (out / ".build-tmp").exists()
        shutil.rmtree(out)  # the next kill starts from nothing
    print(f"shards on disk when killed: {partial} of {len(reference.files)}")
    assert max(partial) > 0
