"""The rest of the chain after curation, for one run directory: tokenizer -> mixture -> training -> evaluation.

``python -m pipelines.run sample --train`` (what ``quickstart.sh`` runs) ends here: a byte-level BPE
trained on the deduplicated documents, a one-epoch mixture of all their tokens, and one epoch of the
tiny model under ``torchrun`` (2 ranks, gloo on CPU), exported to a Hugging Face checkpoint; the
``--model --vocab-size --nproc --seq-len`` flags of ``pipelines.run`` set those four. Each step is
skipped when its output is already complete, so a rerun resumes (with the same knobs: ``chain.json``).

The mixture spec asks for ``target_tokens: epoch``: the build counts the tokens while it tokenizes
the run's kept documents (``deduped/`` when dedup ran, else ``curated/``: ``common.run_dir``), so the
chain never reads a dump itself. With ``--executor ray`` the tokenizer and the mixture run as Ray work
(``pipelines/ray_cluster/chain.py``), with the same output; the trainer stays a ``torchrun`` on the driver.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.atomic import atomic_write_text
from common.lifetime import die_with_parent
from common.storage import as_path, is_remote
from mixtures.spec import EPOCH
from pipelines.chain_store import StoreStaging, staging
from pipelines.errors import ExecutorError

if TYPE_CHECKING:
    from common.ray_cluster.executor import RayOptions
    from mixtures.manifest import Manifest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ChainConfig:
    """The chain's knobs (``pipelines.run --train --model --vocab-size --nproc --seq-len``)."""

    vocab_size: int = 4096
    seq_len: int = 256
    model: str = "tiny"  # a trainer preset or a model YAML (trainer/model_spec.py)
    nproc: int = 2
    micro_batch: int = 8
    lr: float = 3e-3
    tokens_per_file: int = 20_000
    sft: str | None = None  # conversations to fine-tune the trained model on (trainer.sft), into sft/

    def __post_init__(self) -> None:
        # a byte-level BPE starts from 256 byte tokens plus <|endoftext|>
        from tokenizer.train import MAX_VOCAB, MIN_VOCAB
        from trainer.config import MAX_SEQ_LEN

        if not MIN_VOCAB <= self.vocab_size <= MAX_VOCAB:  # the tokenizer's own bounds, checked before curation
            raise ExecutorError(
                f"--vocab-size must be in [{MIN_VOCAB}, {MAX_VOCAB}] (256 bytes + <|endoftext|> + at least one "
                f"merge; ids fit uint32), got {self.vocab_size}"
            )
        for name in ("seq_len", "nproc", "micro_batch", "tokens_per_file"):
            if getattr(self, name) < 1:
                raise ExecutorError(f"chain {name} must be >= 1, got {getattr(self, name)}")
        if self.seq_len > MAX_SEQ_LEN:
            raise ExecutorError(f"--seq-len must be <= {MAX_SEQ_LEN}, got {self.seq_len}")
        if self.nproc > max_ranks():
            raise ExecutorError(f"--nproc must be <= {max_ranks()} (one rank per CPU core here), got {self.nproc}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ExecutorError(f"chain lr must be finite and > 0, got {self.lr}")
        from trainer.model_spec import ModelSpecError, base_model

        try:  # a preset name or a model file: known now, not after curation
            base_model(self.model)
        except ModelSpecError as err:
            raise ExecutorError(f"--model: {err}") from None


def max_ranks() -> int:
    """The most training ranks the chain starts on this machine: one per CPU core it may use, at least 4
    (each rank holds a model and its optimizer state: the audit's 64 ranks took 14 GiB, then the OOM killer)."""
    return max(4, len(os.sched_getaffinity(0)))


CHAIN_RECORD = "chain.json"


def check_chain_record(run_dir: Path, config: ChainConfig) -> None:
    """A rerun resumes only the chain it started: other knobs over existing outputs would be silently ignored."""
    record = run_dir / CHAIN_RECORD
    mine = asdict(config)
    if record.is_file():
        theirs = json.loads(record.read_text())
        changed = sorted(k for k in mine if theirs.get(k) != mine[k])
        if changed:
            raise ExecutorError(
                f"{run_dir} holds a chain built with other settings ({', '.join(changed)}); use another --out "
                "or delete its tokenizer/, mixture/, train/ and chain.json"
            )
    else:
        atomic_write_text(record, json.dumps(mine, indent=1))


def held_out_files(manifest: Manifest, config: ChainConfig) -> int:
    """Shard files held out for the validation loss: the last one when it holds a micro-batch per rank and the
    others still fill a global batch; none (said in one line) on a run too small for both. Token counts are
    known only after curation, so this is checked here, before training, instead of failing inside torchrun."""
    window, batch = config.seq_len + 1, config.micro_batch * config.nproc
    windows = [shard.tokens // window for shard in manifest.files]
    if sum(windows) < batch:
        raise ExecutorError(
            f"the mixture's {manifest.total_tokens} tokens make {sum(windows)} training windows of {window} tokens, "
            f"fewer than one global batch ({config.nproc} ranks x {config.micro_batch}); curate more WARC files "
            "or lower --seq-len or --nproc"
        )
    if len(windows) >= 2 and windows[-1] >= batch and sum(windows[:-1]) >= batch:
        return 1
    print(
        f"validation: none: the mixture's {manifest.total_tokens} tokens in {len(windows)} shard file(s) "
        "cannot spare a held-out file (the final evaluation still runs)",
        flush=True,
    )
    return 0


def mixture_spec(run_dir: Path, tok_dir: Path, config: ChainConfig) -> dict[str, Any]:
    """One epoch of the run's kept documents: the build counts the tokens while it tokenizes them."""
    return {
        "tokenizer": str(tok_dir),
        "target_tokens": EPOCH,
        "seq_len": config.seq_len,
        "seed": 0,
        "tokens_per_file": config.tokens_per_file,
        "sources": [{"name": run_dir.name, "path": str(run_dir)}],
    }


def run_chain(
    run_dir: Path, config: ChainConfig | None = None, ray: RayOptions | None = None, train: bool = True, **evals: Any
) -> dict[str, Any]:
    """Tokenizer, mixture and (unless ``train=False``) training for ``run_dir``, on Ray when ``ray`` is given, and
    the trained model's final evaluation (``evals.final``; ``evals``: its ``blimp=`` file)."""
    config = config or ChainConfig()
    check_chain_record(run_dir, config)
    if not is_remote(run_dir):
        return _run_chain(run_dir, config, ray, train, None, **evals)
    if ray is not None:  # the tokenizer and mixture read a local copy of the documents: on the driver
        print("chain: the run directory is a store URL: tokenizer and mixture run on the driver, not as Ray work")
    with staging(run_dir) as staged:
        return _run_chain(run_dir, config, None, train, staged, **evals)


def _run_chain(
    run_dir: Path, config: ChainConfig, ray: RayOptions | None, train: bool, staged: StoreStaging | None, **evals: Any
) -> dict[str, Any]:
    """The chain's steps; with `staged` (a store run) the tokenizer and mixture work on local copies
    (pipelines/chain_store.py) and the trainer on the store's URLs (trainer/store.py)."""
    if ray is None:
        from mixtures.build import build_mixture
        from tokenizer.train import train_tokenizer
    else:  # the same functions, run as Ray work
        from pipelines.ray_cluster.chain import RayChain

        chain = RayChain(ray)
        train_tokenizer, build_mixture = chain.train_tokenizer, chain.build_mixture
    tok_dir, mix_dir, train_dir = run_dir / "tokenizer", run_dir / "mixture", run_dir / "train"
    # where each step reads and writes: the run's folders, or their local twins for a store run
    tok_work = staged.folder("tokenizer") if staged else tok_dir
    mix_work = staged.folder("mixture") if staged else mix_dir
    documents = staged.documents if staged else lambda: run_dir
    if not (tok_dir / "tokenizer.json").is_file():
        print(f"\n== tokenizer: byte-level BPE, vocab {config.vocab_size} -> {tok_dir}", flush=True)
        trained = train_tokenizer([str(documents())], tok_work, vocab_size=config.vocab_size)
        if trained.shortfall():
            print(trained.shortfall(), flush=True)
        if staged:
            staged.publish("tokenizer", "tokenizer.json")
    if not (mix_dir / "manifest.json").is_file():
        print(f"\n== mixture: one epoch of {run_dir.name}'s documents -> {mix_dir}", flush=True)
        if staged:  # the mixture's two inputs fetched together (nothing to fetch for those already here)
            staged.fetch_with_documents("tokenizer")
        # a store run's documents may still be arriving: the build tokenizes each file as it lands
        spec = mixture_spec(staged.documents(wait=False) if staged else run_dir, tok_work, config)
        if staged:  # the shards uploaded while they are written, the manifest last
            manifest = staged.build_mixture(spec, "mixture")
        else:
            manifest = build_mixture(spec, mix_work, overwrite=True)
        print(f"mixture: {manifest.total_tokens} tokens of {manifest.sources[run_dir.name].documents} documents")
    if staged:
        staged.fetch("mixture")
    if train and not (train_dir / "hf" / "config.json").is_file():
        from mixtures.manifest import read_manifest

        holdout = held_out_files(read_manifest(mix_work, verify=False), config)
        print(f"\n== train: {config.model} model, one epoch, torchrun x{config.nproc} -> {train_dir}", flush=True)
        command = [
            sys.executable, "-m", "trainer.launch", "--standalone", f"--nproc_per_node={config.nproc}",
            str(REPO / "trainer" / "fsdp_train.py"),
            "--shards", str(mix_dir), "--tokenizer", str(tok_dir), "--model", config.model,
            "--out", str(train_dir), "--micro-batch", str(config.micro_batch), "--lr", str(config.lr),
            "--val-holdout-files", str(holdout), "--eval-every", "5", "--log-every", "5",
            "--resume",  # a killed chain continues its training from the newest checkpoint
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        # the launcher dies with this process, and its ranks with it (trainer/fsdp_train.py)
        done = subprocess.run(command, cwd=REPO, env=env, preexec_fn=die_with_parent)  # noqa: PLW1509
        if done.returncode != 0:  # trainer.launch has printed the ranks' one line (or the crash's)
            raise ExecutorError(f"training in {train_dir} stopped with exit code {done.returncode} (its reason above)")
    result: dict[str, Any] = {
        "tokenizer": str(tok_dir / "tokenizer.json"),
        "mixture": str(mix_dir / "manifest.json"),
        "metrics": str(train_dir / "metrics.jsonl"),
        "hf": str(train_dir / "hf"),
    }
    if train and config.sft is not None:
        result["sft"] = run_sft(train_dir / "hf", Path(config.sft), run_dir / "sft", config)
    if train:
        from evals.final import EVAL_JSON, evaluate_chain

        train_work = staged.fetch_training("train") if staged else train_dir
        result["evaluation"] = evaluate_chain(train_work, mix_work, **evals)
        if staged:
            staged.publish_evaluation("train", EVAL_JSON)
    return result


SFT_HELD_OUT = 200  # conversations of the --sft file held out for the response loss


def run_sft(base: Path, data: Path, out: Path, config: ChainConfig) -> dict[str, Any]:
    """Fine-tune the trained model (trainer.sft under torchrun, resumable); the held-out response loss before/after."""
    if not (out / "hf" / "config.json").is_file():
        print(f"\n== sft: {base} on {data}, torchrun x{config.nproc} -> {out}", flush=True)
        command = [
            sys.executable, "-m", "trainer.launch", "--standalone", f"--nproc_per_node={config.nproc}",
            "-m", "trainer.sft", "--base", str(base), "--data", str(data), "--out", str(out),
            "--val-holdout", str(SFT_HELD_OUT), "--eval-every", "50", "--log-every", "10", "--lr", str(config.lr),
            "--micro-batch", str(config.micro_batch), "--checkpoint-every", "50", "--resume",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, cwd=REPO, env=env, preexec_fn=die_with_parent)  # noqa: PLW1509
        if done.returncode != 0:  # trainer.launch has printed the ranks' one line (or the crash's)
            raise ExecutorError(f"fine-tuning in {out} stopped with exit code {done.returncode} (its reason above)")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val = [(r["step"], r["val_response_loss"]) for r in rows if "val_response_loss" in r]
    return {"metrics": str(out / "metrics.jsonl"), "hf": str(out / "hf"), "checkpoint_dir": str(out / "checkpoints"),
            "val_response_loss": val}  # fmt: skip


def print_chain(result: dict[str, Any]) -> None:
    metrics = as_path(result["metrics"])
    rows = map(json.loads, metrics.read_text().splitlines()) if metrics.is_file() else []
    losses = [row["loss"] for row in rows if "loss" in row]
    print(f"tokenizer: {result['tokenizer']}")
    print(f"token mixture: {result['mixture']}")
    if losses:
        print(f"training loss: {losses[0]:.3f} -> {losses[-1]:.3f} over the epoch ({result['metrics']})")
    print(f"Hugging Face checkpoint: {result['hf']}")
    if "sft" in result:
        val = result["sft"]["val_response_loss"]
        if val:
            print(
                f"SFT held-out response loss: {val[0][1]:.3f} (base) -> {val[-1][1]:.3f} ({result['sft']['metrics']})"
            )
        print(f"fine-tuned Hugging Face checkpoint: {result['sft']['hf']}")
    if "evaluation" in result:
        print(result["evaluation"]["summary"])
