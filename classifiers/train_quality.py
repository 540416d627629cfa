"""``python -m classifiers.train_quality --positive P --negative N --out model.bin``: a DCLM-style
fastText quality classifier (supervised, word bigrams), trained on one split and measured on another.

fastText's default ``bucket`` (2M rows of bigram hashes) makes a ~760 MB model; the default here is
200k, which keeps the model to tens of MB with little loss on a binary task, and ``--quantize``
shrinks it further (a ``.ftz``-style product-quantized file, written to ``--out``). The held-out
split is by ``group`` (see ``classifiers.text_io``), so parts of one article never straddle it.

Prints precision and recall at score 0.5, ROC-AUC, and the threshold that keeps the top x % of a
calibration set (``--calibration``, default: the held-out documents); all of it also goes to
``<out>.json``, where ``QualityClassifierFilter`` reads its top-fraction threshold.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from classifiers.ft_train import train_supervised
from classifiers.lid import LABEL_PREFIX
from classifiers.metrics import precision_recall, quantiles, roc_auc, top_fraction_threshold
from classifiers.quality_model import NEGATIVE, POSITIVE, QualityModel, fasttext_line, write_sidecar
from classifiers.text_io import TextDoc, read_documents
from common.cli import NODE_CPUS, ArgumentParser, integer, one_line, real
from common.config import config_from_args
from common.lock import check_not_input


@dataclass(frozen=True)
class TrainConfig:
    dim: int = 64
    epoch: int = 5
    lr: float = 0.1
    word_ngrams: int = 2
    bucket: int = 200_000
    min_count: int = 3
    threads: int = 2
    seed: int = 0
    heldout: float = 0.2
    quantize: bool = False
    quantize_cutoff: int = 100_000
    top_fractions: tuple[float, ...] = (0.1, 0.3, 0.5)

    def check(self) -> None:
        """Every knob in range before reading or training (fastText aborted with a traceback, or trained
        nothing and exited 0, on --lr nan, --threads 0, --word-ngrams 0, --dim 0, --heldout 2 ...)."""
        counts = {"dim": 1, "epoch": 1, "word_ngrams": 1, "bucket": 0, "min_count": 1, "threads": 1, "seed": 0}
        for name, low in counts.items():
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(self, name)}")
        if self.word_ngrams > 1 and self.bucket < 1:  # fastText hashes the n-grams into no rows: its process died
            raise ValueError(f"--bucket must be >= 1 with --word-ngrams {self.word_ngrams}, got {self.bucket}")
        if not 0 < self.lr < math.inf:
            raise ValueError(f"--lr must be a finite number > 0, got {self.lr}")
        if not 0 <= self.heldout < 1:
            raise ValueError(f"--heldout must be a share in [0, 1), got {self.heldout}")
        if not all(0 < f <= 1 for f in self.top_fractions):
            raise ValueError(f"--top-fraction values must be in (0, 1], got {list(self.top_fractions)}")


@dataclass
class TrainReport:
    model: str
    model_bytes: int
    train: dict[str, int]
    heldout: dict[str, float]
    calibration: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)


def _unit(seed: int, group: str) -> float:
    digest = hashlib.blake2b(f"{seed}\0{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def split_heldout(docs: Sequence[TextDoc], fraction: float, seed: int) -> tuple[list[TextDoc], list[TextDoc]]:
    """Whole groups to held-out with probability ``fraction`` (stable under reordering of inputs);
    at least one group each side when there are two or more."""
    groups = sorted({d.group for d in docs}, key=lambda g: _unit(seed, g))
    chosen = {g for g in groups if _unit(seed, g) < fraction}
    if fraction > 0 and not chosen and len(groups) > 1:
        chosen = {groups[0]}
    if len(chosen) == len(groups) and len(groups) > 1:
        chosen.discard(groups[-1])
    train = [d for d in docs if d.group not in chosen]
    held = [d for d in docs if d.group in chosen]
    return train, held


def write_training_file(path: Path, positive: Sequence[TextDoc], negative: Sequence[TextDoc], seed: int) -> int:
    lines = [f"{LABEL_PREFIX}{POSITIVE} {fasttext_line(d.text)}" for d in positive]
    lines += [f"{LABEL_PREFIX}{NEGATIVE} {fasttext_line(d.text)}" for d in negative]
    random.Random(seed).shuffle(lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def fit(train_file: Path, out: Path, config: TrainConfig) -> None:
    params = {
        "input": str(train_file),
        "dim": config.dim,
        "epoch": config.epoch,
        "lr": config.lr,
        "wordNgrams": config.word_ngrams,
        "bucket": config.bucket,
        "minCount": config.min_count,
        "loss": "softmax",
        "thread": config.threads,
        "seed": config.seed,
        "verbose": 0,
    }
    quantize = None
    if config.quantize:
        quantize = {"input": str(train_file), "qnorm": True, "retrain": True, "cutoff": config.quantize_cutoff}
    train_supervised(params, out, quantize)


def train(
    positive: Sequence[TextDoc],
    negative: Sequence[TextDoc],
    out: str | Path,
    config: TrainConfig | None = None,
    calibration: Sequence[TextDoc] | None = None,
) -> TrainReport:
    """Train on the training split, measure on the held-out split, write model and sidecar."""
    config = config or TrainConfig()
    out = Path(out)
    pos_train, pos_held = split_heldout(positive, config.heldout, config.seed)
    neg_train, neg_held = split_heldout(negative, config.heldout, config.seed)
    if min(len(pos_train), len(neg_train)) < 1 or min(len(pos_held), len(neg_held)) < 1:
        raise ValueError(
            f"need documents of both classes on both sides of the split: positives {len(pos_train)}/"
            f"{len(pos_held)}, negatives {len(neg_train)}/{len(neg_held)} (train/held-out)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        train_file = Path(tmp) / "train.txt"
        write_training_file(train_file, pos_train, neg_train, config.seed)
        fit(train_file, out, config)
    model = QualityModel(str(out))
    held_scores = model.scores([d.text for d in pos_held + neg_held])
    held_labels = [1] * len(pos_held) + [0] * len(neg_held)
    precision, recall = precision_recall(held_labels, held_scores, 0.5)
    report = TrainReport(
        model=str(out),
        model_bytes=os.path.getsize(out),
        train={"positive": len(pos_train), "negative": len(neg_train)},
        heldout={
            "positive": len(pos_held),
            "negative": len(neg_held),
            "roc_auc": roc_auc(held_labels, held_scores),
            "precision": precision,
            "recall": recall,
            "threshold": 0.5,
        },
        params={k: v for k, v in asdict(config).items() if k != "top_fractions"},
    )
    source = "heldout" if calibration is None else "calibration"
    calib_scores = held_scores if calibration is None else model.scores([d.text for d in calibration])
    thresholds = {f"{f:g}": top_fraction_threshold(calib_scores, f) for f in config.top_fractions}
    at_threshold = {}
    for key, t in thresholds.items():
        p, r = precision_recall(held_labels, held_scores, t)
        at_threshold[key] = {"threshold": t, "heldout_precision": p, "heldout_recall": r}
    report.calibration = {
        "source": source,
        "documents": len(calib_scores),
        "top_fraction_thresholds": thresholds,
        "at_top_fraction": at_threshold,
        "quantiles": quantiles(calib_scores),
    }
    write_sidecar(
        out,
        {
            "model": out.name,
            "positive_label": POSITIVE,
            "negative_label": NEGATIVE,
            **{k: v for k, v in asdict(report).items() if k != "model"},
        },
    )
    return report


def format_report(report: TrainReport) -> str:
    h = report.heldout
    lines = [
        f"model: {report.model} ({report.model_bytes / 1e6:.1f} MB)",
        f"train: {report.train['positive']} positive, {report.train['negative']} negative",
        f"held-out: {h['positive']} positive, {h['negative']} negative",
        f"held-out ROC-AUC: {h['roc_auc']:.4f}",
        f"held-out precision: {h['precision']:.4f}  recall: {h['recall']:.4f}  (score >= {h['threshold']})",
        f"top-fraction thresholds on {report.calibration['documents']} {report.calibration['source']} documents:",
    ]
    for key, v in report.calibration["at_top_fraction"].items():
        lines.append(
            f"  keep top {float(key):.0%}: score >= {v['threshold']:.4f}  "
            f"(held-out precision {v['heldout_precision']:.4f}, recall {v['heldout_recall']:.4f})"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = ArgumentParser(prog="python -m classifiers.train_quality", description=__doc__.splitlines()[0])
    p.add_argument("--positive", nargs="+", required=True, help="high-quality documents (parquet/jsonl/txt/dirs)")
    p.add_argument("--negative", nargs="+", required=True, help="low-quality documents")
    p.add_argument("--out", required=True, help="model path; metadata goes to OUT.json")
    p.add_argument("--calibration", nargs="+", default=None, help="documents like those to filter (top-x %%)")
    p.add_argument("--field", default="text", help="text field/column of jsonl/parquet inputs")
    p.add_argument("--dim", type=integer(1, 1 << 10), default=d.dim)
    p.add_argument("--epoch", type=integer(1, 10_000), default=d.epoch)
    p.add_argument("--lr", type=real(0, 100, open_low=True), default=d.lr)
    p.add_argument("--word-ngrams", type=integer(1, 64), default=d.word_ngrams)
    p.add_argument("--bucket", type=integer(0, 1 << 26), default=d.bucket, help="hash rows for word n-grams (size!)")
    p.add_argument("--min-count", type=integer(1, 1 << 40), default=d.min_count)
    p.add_argument("--threads", type=NODE_CPUS, default=d.threads)
    p.add_argument("--seed", type=integer(0, (1 << 31) - 1), default=d.seed)
    p.add_argument("--heldout", type=real(0, 1, open_high=True), default=d.heldout, help="held-out share of groups")
    p.add_argument("--quantize", action="store_true", help="product-quantize the model (much smaller)")
    p.add_argument(
        "--top-fraction",
        dest="top_fractions",
        metavar="TOP_FRACTION",
        type=real(0, 1, open_low=True),
        nargs="+",
        default=d.top_fractions,
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = config_from_args(TrainConfig, args)
    try:  # the model (and OUT.json) must not replace a file it is trained on
        config.check()
        inputs = [*args.positive, *args.negative, *(args.calibration or [])]
        for out in (args.out, f"{args.out}.json"):
            check_not_input(out, {f"input {p}": p for p in inputs}, {f"input folder {p}": p for p in inputs})
        positive = read_documents(args.positive, args.field)
        negative = read_documents(args.negative, args.field)
        calibration = read_documents(args.calibration, args.field) if args.calibration else None
        report = train(positive, negative, args.out, config, calibration)
    except (OSError, ValueError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print(format_report(report))
    print(f"wrote {args.out} and {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
