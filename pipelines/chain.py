"""The rest of the chain after curation, for one run directory: tokenizer -> mixture -> training.

``python -m pipelines.run sample --train`` (what ``quickstart.sh`` runs) ends here: a byte-level BPE
trained on the deduplicated documents, a one-epoch mixture of all their tokens, and one epoch of the
tiny model under ``torchrun`` (2 ranks, gloo on CPU), exported to a Hugging Face checkpoint. Each
step is skipped when its output is already complete, so a rerun resumes.

The mixture spec asks for ``target_tokens: epoch``: the build counts the tokens while it tokenizes
the run's kept documents (``deduped/`` when dedup ran, else ``curated/``: ``common.run_dir``), so the
chain never reads a dump itself. With ``ray`` options (``--executor ray``) the tokenizer is trained as
one Ray task and the mixture's tokenization and shard writing run as Ray tasks
(``pipelines/ray_cluster/chain.py``), with the same output as here; the trainer stays a ``torchrun`` on the
driver's machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixtures.spec import EPOCH

if TYPE_CHECKING:
    from pipelines.ray_cluster.chain import RayOptions

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ChainConfig:
    vocab_size: int = 4096
    seq_len: int = 256
    model: str = "tiny"
    nproc: int = 2
    micro_batch: int = 8
    lr: float = 3e-3
    tokens_per_file: int = 20_000


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
    run_dir: Path, config: ChainConfig | None = None, ray: RayOptions | None = None, train: bool = True
) -> dict[str, str]:
    """Tokenizer, mixture and (unless ``train=False``) training for ``run_dir``; on Ray when ``ray`` is given."""
    from mixtures.build import build_mixture
    from tokenizer.train import train_tokenizer

    config = config or ChainConfig()
    on_ray = None
    if ray is not None:
        from pipelines.ray_cluster.chain import RayChain

        on_ray = RayChain(ray)
    tok_dir, mix_dir, train_dir = run_dir / "tokenizer", run_dir / "mixture", run_dir / "train"
    if not (tok_dir / "tokenizer.json").is_file():
        print(f"\n== tokenizer: byte-level BPE, vocab {config.vocab_size} -> {tok_dir}", flush=True)
        if on_ray:
            on_ray.train_tokenizer([str(run_dir)], tok_dir, vocab_size=config.vocab_size)
        else:
            train_tokenizer([str(run_dir)], tok_dir, vocab_size=config.vocab_size)
    if not (mix_dir / "manifest.json").is_file():
        print(f"\n== mixture: one epoch of {run_dir.name}'s documents -> {mix_dir}", flush=True)
        spec = mixture_spec(run_dir, tok_dir, config)
        manifest = on_ray.build_mixture(spec, mix_dir) if on_ray else build_mixture(spec, mix_dir, overwrite=True)
        print(f"mixture: {manifest.total_tokens} tokens of {manifest.sources[run_dir.name].documents} documents")
    if train and not (train_dir / "hf" / "config.json").is_file():
        print(f"\n== train: {config.model} model, one epoch, torchrun x{config.nproc} -> {train_dir}", flush=True)
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.nproc}",
            str(REPO / "trainer" / "fsdp_train.py"),
            "--shards", str(mix_dir), "--tokenizer", str(tok_dir), "--model", config.model,
            "--out", str(train_dir), "--micro-batch", str(config.micro_batch), "--lr", str(config.lr),
            "--val-holdout-files", "1", "--eval-every", "5", "--log-every", "5",
        ]  # fmt: skip
        subprocess.run(command, check=True, cwd=REPO, env={**_env(), "OMP_NUM_THREADS": "1"})
    return {
        "tokenizer": str(tok_dir / "tokenizer.json"),
        "mixture": str(mix_dir / "manifest.json"),
        "metrics": str(train_dir / "metrics.jsonl"),
        "hf": str(train_dir / "hf"),
    }


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


def print_chain(result: dict[str, str]) -> None:
    losses = []
    metrics = Path(result["metrics"])
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            if "loss" in row:
                losses.append(row["loss"])
    print(f"tokenizer: {result['tokenizer']}")
    print(f"token mixture: {result['mixture']}")
    if losses:
        print(f"training loss: {losses[0]:.3f} -> {losses[-1]:.3f} over the epoch ({result['metrics']})")
    print(f"Hugging Face checkpoint: {result['hf']}")
