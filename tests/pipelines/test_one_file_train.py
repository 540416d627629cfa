"""Issue 31's reproduction: ``pipelines.run ONE.warc.gz --train`` on a run too small to hold out a shard file.

It used to curate, tokenize and mix, then fail inside torchrun (``cannot hold out 1 of 1 shard files``, a
``ChildFailedError`` block and a traceback, exit 1). Now the chain trains without a held-out file and says so,
the final evaluation runs, and the run folder is named after the file. A real WARC (Heritrix 2008, shared data)
the project never tuned on; BLiMP cut to 40 pairs so the evaluation stays short."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from tests.support import shared_data
from tests.support.cli import run_cli

pytestmark = pytest.mark.e2e

WARC = "aut_archive-org-2008_heritrix.warc.gz"
BLIMP_PAIRS = 40


def test_a_one_file_run_trains_without_a_held_out_file(tmp_path: Path) -> None:
    root = shared_data.require()
    blimp = tmp_path / "blimp.jsonl"
    with gzip.open(root / "blimp" / "blimp.jsonl.gz", "rt", encoding="utf-8") as source:
        blimp.write_text("".join(itertools.islice(source, BLIMP_PAIRS)))
    out = tmp_path / "out"
    args = [str(root / "warc_samples" / WARC), "--out", str(out), "--workers", "1", "--train", "--eval-blimp"]
    proc = run_cli("pipelines.run", *args, str(blimp), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr
    assert "in 1 shard file(s) cannot spare a held-out file" in proc.stdout
    assert "final evaluation: no held-out documents" in proc.stdout
    run = out / WARC.removesuffix(".warc.gz")  # not OUT/local/
    report = json.loads((run / "train" / "eval.json").read_text())
    assert report["inputs"]["held_out_files"] == 0 and report["tasks"]["blimp"]["n"] == BLIMP_PAIRS
    assert (run / "train" / "hf" / "model.safetensors").is_file()
    assert "BLiMP" in (run / "report" / "index.html").read_text()
