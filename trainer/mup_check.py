"""μP's coordinate check: activation scales per layer across widths, standard parametrisation beside μP.

    python -m trainer.mup_check --widths 64 128 256 512 --steps 5

Builds the model (`--n-layers` deep, `--n-heads` heads, so head_dim grows with the width; ffn 4 x dim) at
each width, in SP and in μP with base width `--base-dim` (the smallest width by default), trains each
`--steps` AdamW steps at a constant `--lr` on the same tokens (a token mixture's windows with `--shards`,
else a fixed random bigram chain), and prints per layer the mean |coordinate| of its output after the last
step at every width (averaged over `--seeds` initialisations), and the largest / smallest of them across
widths. Under μP the columns stay flat (Yang et al., Tensor Programs V, Fig. 5); under SP the updates grow
with width, and with them the attention / MLP outputs, the residual stream and the logits.
`--json FILE` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from common.atomic import atomic_write_text
from common.cli import BATCH, NODE_CPUS, ArgumentParser, fail, integer, real
from trainer.config import MAX_SEQ_LEN, SHAPE_LIMITS, ModelConfig
from trainer.model import Transformer, lm_loss
from trainer.optim import build_optimizer

VOCAB = 256  # the synthetic chain's alphabet


@dataclass(frozen=True)
class CheckSpec:
    widths: tuple[int, ...] = (64, 128, 256, 512)
    base_dim: int = 0  # 0: the smallest width
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 16
    lr: float = 1e-2
    seq_len: int = 32
    batch: int = 8
    seeds: int = 2  # the sizes are averaged over this many initialisations (as `mup`'s coord check does)

    def check(self) -> None:
        """One ValueError line for a set of widths μP cannot compare."""
        if len(self.widths) < 2 or any(w < 1 for w in self.widths):
            raise ValueError(f"--widths needs two or more positive widths, got {list(self.widths)}")
        at_least = {"n_layers": 1, "n_heads": 1, "steps": 0, "seq_len": 2, "batch": 1, "seeds": 1}
        for name, low in at_least.items():  # before the widths: --n-heads 0 was a ZeroDivisionError there
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}")
        base = self.base
        for w in self.widths:
            if w % self.n_heads or (w // self.n_heads) % 2:
                raise ValueError(f"width {w} must be a multiple of --n-heads {self.n_heads} with an even head_dim")
            if base > w or w % base:
                raise ValueError(f"--base-dim {base} must divide every width and be <= it, not {w}")
        if not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")

    @property
    def base(self) -> int:
        return self.base_dim or min(self.widths)


def synthetic_tokens(spec: CheckSpec, rows: int) -> torch.Tensor:
    """(rows, seq_len + 1) ids of a fixed random bigram chain (each token has 4 likely successors)."""
    gen = torch.Generator().manual_seed(1234)
    successors = torch.randint(0, VOCAB, (VOCAB, 4), generator=gen)
    out = torch.empty(rows, spec.seq_len + 1, dtype=torch.long)
    out[:, 0] = torch.randint(0, VOCAB, (rows,), generator=gen)
    for t in range(1, spec.seq_len + 1):
        pick = torch.randint(0, 4, (rows,), generator=gen)
        out[:, t] = successors[out[:, t - 1], pick]
    return out


def shard_tokens(shards: Path, spec: CheckSpec, rows: int) -> tuple[torch.Tensor, int]:
    """The first `rows` windows of a token mixture, and its tokenizer's vocab size."""
    from mixtures.reader import ShardReader
    from trainer.data import WindowIndex

    reader = ShardReader(shards, verify=False)
    index = WindowIndex(reader, spec.seq_len)
    if index.num_windows < rows:
        raise ValueError(f"{shards} holds {index.num_windows} windows of {spec.seq_len + 1} tokens, need {rows}")
    import numpy as np

    return index.batch(np.arange(rows)), reader.manifest.tokenizer.vocab_size


def model_config(spec: CheckSpec, width: int, mup: bool, vocab: int) -> ModelConfig:
    return ModelConfig(dim=width, n_layers=spec.n_layers, n_heads=spec.n_heads, n_kv_heads=spec.n_heads,
                       ffn_dim=4 * width, vocab_size=vocab, max_seq_len=spec.seq_len,
                       mup_base_dim=spec.base if mup else 0)  # fmt: skip


def watched_layers(model: Transformer) -> dict[str, nn.Module]:
    """The modules whose outputs are measured, by a short name."""
    layers: dict[str, nn.Module] = {"embedding": model.tok_embeddings}
    for i, block in enumerate(model.layers):
        layers[f"block{i}.attention"] = block.attention
        layers[f"block{i}.mlp"] = block.feed_forward
        layers[f"block{i}.residual"] = block
    layers["logits"] = model.output
    return layers


def coordinate_sizes(spec: CheckSpec, tokens: torch.Tensor, vocab: int, width: int, mup: bool) -> dict[str, float]:
    """Mean |coordinate| of each watched layer's output on a held-out batch after `spec.steps` AdamW steps,
    averaged over the seeds."""
    runs = [_sizes_after_training(spec, tokens, vocab, width, mup, seed) for seed in range(spec.seeds)]
    return {layer: sum(r[layer] for r in runs) / len(runs) for layer in runs[0]}


def _sizes_after_training(
    spec: CheckSpec, tokens: torch.Tensor, vocab: int, width: int, mup: bool, seed: int
) -> dict[str, float]:
    torch.manual_seed(seed)
    cfg = model_config(spec, width, mup, vocab)
    model = Transformer(cfg)
    optimizer = build_optimizer(model, spec.lr, weight_decay=0.0, mup_width_mult=cfg.mup_width_mult if mup else None)
    batches = tokens.split(spec.batch)
    for step in range(spec.steps):
        batch = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        lm_loss(model(batch[:, :-1]), batch[:, 1:]).backward()
        optimizer.step()
    sizes: dict[str, float] = {}

    def record(name: str) -> Callable[..., None]:
        return lambda _module, _inputs, out: sizes.__setitem__(name, float(out.abs().mean()))

    hooks = [module.register_forward_hook(record(name)) for name, module in watched_layers(model).items()]
    with torch.no_grad():
        batch = batches[spec.steps % len(batches)]
        model(batch[:, :-1])
    for hook in hooks:
        hook.remove()
    return sizes


def run(spec: CheckSpec, shards: Path | None = None) -> dict[str, dict[int, dict[str, float]]]:
    """{"sp"|"mup": {width: {layer: mean |coordinate|}}}."""
    spec.check()
    rows = spec.batch * (spec.steps + 1)
    tokens, vocab = shard_tokens(shards, spec, rows) if shards is not None else (synthetic_tokens(spec, rows), VOCAB)
    return {kind: {w: coordinate_sizes(spec, tokens, vocab, w, kind == "mup") for w in spec.widths}
            for kind in ("sp", "mup")}  # fmt: skip


def spread(sizes: dict[int, dict[str, float]], layer: str) -> float:
    """Largest / smallest of a layer's coordinate size across the widths (1: perfectly flat)."""
    values = [by_layer[layer] for by_layer in sizes.values()]
    return max(values) / min(values)


def table(result: dict[str, dict[int, dict[str, float]]]) -> str:
    widths = list(result["sp"])
    layers = list(result["sp"][widths[0]])
    cols = " ".join(f"{w:>8}" for w in widths)
    lines = [f"{'layer':<18} | SP {cols} {'max/min':>8} | muP {cols} {'max/min':>8}"]
    for layer in layers:
        row = [f"{layer:<18}"]
        for kind in ("sp", "mup"):
            values = " ".join(f"{result[kind][w][layer]:8.4f}" for w in widths)
            row.append(f"{'SP' if kind == 'sp' else 'muP'} {values} {spread(result[kind], layer):8.2f}")
        lines.append(" | ".join(row))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = CheckSpec()
    parser.add_argument("--widths", type=integer(1, SHAPE_LIMITS["dim"]), nargs="+", default=list(defaults.widths))
    parser.add_argument(
        "--base-dim",
        type=integer(0, SHAPE_LIMITS["dim"]),
        default=0,
        help="μP base width (default: the smallest width)",
    )
    parser.add_argument("--n-layers", type=integer(1, SHAPE_LIMITS["n_layers"]), default=defaults.n_layers)
    parser.add_argument("--n-heads", type=integer(1, SHAPE_LIMITS["n_heads"]), default=defaults.n_heads)
    parser.add_argument(
        "--steps", type=integer(0, 1 << 20), default=defaults.steps, help="AdamW steps before measuring"
    )
    parser.add_argument(
        "--lr", type=real(0, 1e3, open_low=True), default=defaults.lr, help="constant learning rate (no warmup)"
    )
    parser.add_argument("--seq-len", type=integer(2, MAX_SEQ_LEN), default=defaults.seq_len)
    parser.add_argument("--batch", type=BATCH, default=defaults.batch)
    parser.add_argument(
        "--seeds", type=integer(1, 1 << 16), default=defaults.seeds, help="initialisations averaged over"
    )
    parser.add_argument("--shards", type=Path, help="a mixtures.build folder to take tokens from (default: synthetic)")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--threads", type=NODE_CPUS, default=1, help="torch threads (small matmuls: 1 is fastest)")
    args = parser.parse_args(argv)
    spec = CheckSpec(tuple(args.widths), args.base_dim, args.n_layers, args.n_heads, args.steps, args.lr,
                     args.seq_len, args.batch, args.seeds)  # fmt: skip
    try:
        spec.check()
        if args.json is not None and not args.json.parent.is_dir():
            raise ValueError(f"--json {args.json}: folder {args.json.parent} does not exist")
        if args.json is not None and args.json.exists() and not args.json.is_file():  # a folder, /dev/full
            raise ValueError(f"--json {args.json}: not a regular file; the numbers go to a file")
        torch.set_num_threads(max(1, args.threads))
        result = run(spec, args.shards)
    except (ValueError, OSError) as err:
        fail(err)
    print(table(result))
    flat = max(spread(result["mup"], layer) for layer in result["mup"][spec.widths[0]])
    sp = max(spread(result["sp"], layer) for layer in result["sp"][spec.widths[0]])
    print(f"largest max/min across widths {list(spec.widths)}: muP {flat:.2f}, SP {sp:.2f}")
    if args.json is not None:
        by_kind = {kind: {str(w): sizes for w, sizes in by_width.items()} for kind, by_width in result.items()}
        try:
            atomic_write_text(args.json, json.dumps(by_kind, indent=1))
        except OSError as err:  # a full disk, a folder made meanwhile: after the table, still one line
            fail(f"--json {args.json}: {err}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
