"""The chain's final evaluation (`python -m pipelines.run SOURCE --train`): the exported model, judged on text
of the run it did not train on and on BLiMP.

**Held-out text**: the documents of the mixture's last shard file(s), the ones the chain's trainer holds
out for its validation loss (`--val-holdout-files`, read back from `train/run_config.json`): curated,
deduplicated documents of the same dump that no training step read. They are decoded from their
tokens with the run's tokenizer (a byte-level BPE without normalizer decodes to the exact text; the
`<|endoftext|>` separator is dropped) and scored as bits per byte (`evals.tasks.bpb`) in windows of
the training `seq_len` (the tiny preset's context is 512, the chain trains on 256: positions past
256 were never trained).
**BLiMP**, when a file is given (`pipelines.run --eval-blimp FILE`) or found at the shared data path
(`$CC2MODEL_SHARED_DATA/blimp/blimp.jsonl.gz`, default `../shared/data` beside the repository):
`BLIMP_PAIRS` pairs spread evenly over the file (about 20 per paradigm), to keep the chain quick;
`python -m evals.run` scores all 46,788.

Writes `train/eval.json` (`{"model", "inputs", "held_out", "tasks": {"bpb", "blimp"}, "summary"}`, the
summary being the line the chain prints and the run report shows); a rerun with the same inputs reads
it back instead of scoring again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from common.atomic import atomic_write_text
from common.shared_data import shared_data_dir
from evals.models import load_model
from evals.tasks import Task, evaluate
from evals.tasks.blimp import Blimp
from evals.tasks.bpb import BitsPerByte
from evals.tasks.texts import read_jsonl, spread
from mixtures.reader import ShardReader

BLIMP_PAIRS = 1340  # 67 paradigms x 20, spread evenly over the file
EVAL_JSON = "eval.json"


def shared_blimp() -> Path | None:
    """BLiMP at the shared data path, if it is there."""
    path = shared_data_dir() / "blimp" / "blimp.jsonl.gz"
    return path if path.is_file() else None


def held_out_documents(mixture: Path, tokenizer: Path, holdout_files: int) -> list[str]:
    """The text of every document in the mixture's last `holdout_files` shard files (the trainer's held-out set)."""
    reader = ShardReader(mixture, verify=False)
    eos = reader.manifest.tokenizer.eos_id
    tok = Tokenizer.from_file(str(tokenizer))
    docs = []
    for f in range(len(reader) - holdout_files, len(reader)):
        for d in range(reader.manifest.files[f].documents):
            ids = [int(t) for t in reader.document(f, d) if int(t) != eos]
            docs.append(tok.decode(ids, skip_special_tokens=False))
    return [d for d in docs if d]


def evaluate_chain(train_dir: Path, mixture: Path, blimp: Path | None = None) -> dict[str, Any]:
    """Score `train_dir/hf` on the held-out documents (and BLiMP); cached in `train_dir/eval.json`."""
    train_config = json.loads((train_dir / "run_config.json").read_text())["train_config"]
    holdout = train_config["val_holdout_files"]  # 0: a run too small to spare a file (pipelines.chain)
    blimp = blimp or shared_blimp()
    inputs = {"mixture": str(mixture), "held_out_files": holdout, "blimp": str(blimp) if blimp else None}
    cached = train_dir / EVAL_JSON
    if cached.is_file():
        previous = json.loads(cached.read_text())
        if previous.get("inputs") == inputs:
            return previous
    model = load_model(train_dir / "hf")
    documents = held_out_documents(mixture, train_dir / "hf" / "tokenizer.json", holdout) if holdout else []
    seq_len = train_config["seq_len"] or ShardReader(mixture, verify=False).manifest.seq_len
    tasks: dict[str, Task] = {}
    if documents:
        tasks["bpb"] = BitsPerByte(documents, context=seq_len)  # the positions it trained
    if blimp is not None:
        tasks["blimp"] = Blimp(spread(read_jsonl(blimp), BLIMP_PAIRS))
    results = {name: evaluate(task, model.encoder, model.scorer()) for name, task in tasks.items()}
    report = {"model": str(train_dir / "hf"), "inputs": inputs, "held_out": {"documents": len(documents)}}
    report["tasks"] = results
    report["summary"] = summary_line(report)
    atomic_write_text(cached, json.dumps(report, indent=1) + "\n")
    return report


def summary_line(report: dict[str, Any]) -> str:
    """One line for the chain's final summary."""
    bpb = report["tasks"].get("bpb")
    if bpb is None:
        line = "final evaluation: no held-out documents (the run was too small to hold out a shard file)"
    else:
        line = (
            f"final evaluation: {bpb['bits_per_byte']:.4f} bits/byte on {report['held_out']['documents']} held-out "
            f"documents ({bpb['bytes']:,} bytes)"
        )
    if "blimp" in report["tasks"]:
        blimp = report["tasks"]["blimp"]
        line += f", BLiMP {100 * blimp['accuracy']:.1f} % of {blimp['n']:,} pairs (chance 50 %)"
    return line
