"""FineWeb-style ablation: the same small model trained on an equal token budget of each dataset, compared.

    python -m evals.ablate SPEC.yaml --out DIR

SPEC (YAML; relative paths resolve against the spec's folder):

    datasets:                       # each a run directory (deduped/, else curated/) or a parquet glob
      - {name: raw, path: out/raw/WEB}
      - {name: fineweb, path: "out/fineweb/WEB/curated/*.parquet"}
    tokenizer: out/tokenizer        # optional: else a BPE trained on an equal sample of each dataset
    tokenizer_sample_chars: 2000000 # characters per dataset for that BPE
    vocab_size: 4096
    model: tiny                     # a trainer preset
    tokens: 2000000                 # token budget of every run (the mixture's target_tokens)
    max_repetition: 4               # how often a small dataset may repeat to reach the budget
    seq_len: 256
    seeds: [0, 1]
    eval_points: 4                  # checkpoints evaluated during each run (the last one at the end)
    train: {micro_batch: 8, grad_accum: 1, lr: 0.003, nproc: 1, extra: ["--no-bf16"]}
    tasks: {bpb: ../shared/data/wikitext2_articles/articles_valid.jsonl,
            blimp: ../shared/data/blimp/blimp.jsonl.gz}
    limit: {bpb: 12, blimp: 1340}   # optional: items per task, spread over its JSONL file (or one number for all)
    decision_window: 3              # last evaluations of a run whose std is its checkpoint noise
    checkpoint_average: 1           # a run's score: mean of its last N evaluations

Every stage is the project's own CLI in a subprocess (`tokenizer.train`, `mixtures.build`,
`torchrun trainer/fsdp_train.py`), each step skipped when its output exists, so the same command
resumes (a killed training resumes from its last checkpoint). The trainer evaluates the tasks itself,
on its sharded model, `eval_points` times per run (`--eval-every`, `--eval-task`: trainer/eval_tasks.py),
into the run's metrics.jsonl, which the ablation reads. Writes
`DIR/ablation.json` (`{"runs": [{"dataset", "seed", "step", "tokens", "metrics"}]}`, one row per
evaluated checkpoint), `DIR/plots/<metric>.png` (each metric against tokens, one line per dataset:
the seed mean, the seed range as a band) and `DIR/index.html` (the final table, per metric its signal,
noise, SNR, ranking agreement over seeds and checkpoints and a verdict (`evals.decide`), and the plots).
"""

from __future__ import annotations

import argparse
import glob
import html
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from common import strict_yaml
from common.atomic import atomic_write_text
from common.bounded_input import MAX_DATA_BYTES, decoded_dictionary_bytes, open_regular, read_bounded
from common.cli import SEED, ArgumentParser, integer, one_line, real
from common.lock import FolderLock, FolderUnavailable, check_apart
from common.names import UnsafeName, checked_name
from evals.decide import decisions
from evals.run import write_json_atomic
from evals.tasks import SUITES, headline
from evals.tasks.core import read_manifest
from evals.tasks.texts import read_jsonl, spread
from mixtures.spec import MAX_REPEATS, MAX_TARGET_TOKENS
from tokenizer.artifacts import load_tokenizer, resolve_tokenizer_file
from tokenizer.train import MAX_VOCAB
from trainer.config import MAX_SEQ_LEN

REPO = Path(__file__).resolve().parents[1]


class SpecError(ValueError):
    """The ablation spec is unusable: a one-line error."""


@dataclass
class Dataset:
    name: str
    path: str  # a run directory or a parquet glob


@dataclass
class AblationSpec:
    datasets: list[Dataset]
    tokens: int
    tasks: dict[str, str]
    tokenizer: str | None = None
    tokenizer_sample_chars: int = 2_000_000
    vocab_size: int = 4096
    model: str = "tiny"
    max_repetition: float = 1.0
    seq_len: int = 256
    seeds: list[int] = field(default_factory=lambda: [0])
    eval_points: int = 4
    train: dict[str, Any] = field(default_factory=dict)
    limit: int | dict[str, int] | None = None
    decision_window: int = 3  # last evaluations of a run whose spread is its checkpoint noise (evals.decide)
    checkpoint_average: int = 1  # a run's score: the mean of its last N evaluations (1: the last)


def load_spec(path: Path) -> AblationSpec:
    if not path.is_file():
        raise SpecError(f"spec {path} does not exist")
    try:
        raw = strict_yaml.load_file(path) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        shown = strict_yaml.first_line(err) if isinstance(err, yaml.YAMLError) else str(err)
        raise SpecError(f"{path}: {shown}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the spec must be a mapping")
    base = path.resolve().parent
    known = set(AblationSpec.__dataclass_fields__)
    if set(raw) - known:
        raise SpecError(f"{path}: unknown keys {sorted(set(raw) - known)}")
    for key in ("datasets", "tokens", "tasks"):
        if key not in raw:
            raise SpecError(f"{path}: missing `{key}`")
    if not isinstance(raw["datasets"], list) or not raw["datasets"]:
        raise SpecError(f"{path}: `datasets` must be a non-empty list")
    datasets = []
    for i, d in enumerate(raw["datasets"]):
        if not isinstance(d, dict) or not {"name", "path"} <= set(d):
            raise SpecError(f"{path}: datasets[{i}] needs `name` and `path`")
        try:
            name = checked_name(d["name"], f"{path}: datasets[{i}].name")  # it names folders under --out
        except UnsafeName as err:
            raise SpecError(str(err)) from None
        datasets.append(Dataset(name, _resolve(base, str(d["path"]))))
    if len({d.name for d in datasets}) != len(datasets):
        raise SpecError(f"{path}: dataset names must be unique")
    if not isinstance(raw["tasks"], dict):
        raise SpecError(f"{path}: `tasks` must be a mapping of task name to file")
    _check_counts(raw, path)
    for name in raw["tasks"]:
        try:
            checked_name(name, f"{path}: tasks name")  # it names a folder under --out/tasks/
        except UnsafeName as err:
            raise SpecError(str(err)) from None
    tasks = {str(k): _resolve(base, str(v)) for k, v in raw["tasks"].items()}
    rest = {k: v for k, v in raw.items() if k not in ("datasets", "tasks")}
    if rest.get("tokenizer"):
        rest["tokenizer"] = _resolve(base, str(rest["tokenizer"]))
    spec = AblationSpec(datasets=datasets, tasks=tasks, **rest)
    if spec.eval_points < 1 or spec.tokens < 1 or not spec.seeds:
        raise SpecError(f"{path}: eval_points, tokens and seeds must be positive / non-empty")
    return spec


# The spec's numbers: whole where it counts, within what a real ablation could use (a string or a fraction used
# to end in a traceback mid-run; `decision_window: -1` or `limit: .nan` were never looked at).
COUNTS = {"tokens": integer(1, MAX_TARGET_TOKENS), "eval_points": integer(1, 10_000),
          "seq_len": integer(1, MAX_SEQ_LEN), "vocab_size": integer(1, MAX_VOCAB),
          "tokenizer_sample_chars": integer(1, 1 << 40), "decision_window": integer(1, 10_000),
          "checkpoint_average": integer(1, 10_000), "max_repetition": real(0, MAX_REPEATS, open_low=True)}  # fmt: skip


def _check_counts(raw: dict, path: Path) -> None:
    """Every number of the spec in its range: one SpecError line naming the key."""
    checks = [(f"`{key}`", raw[key], bounded) for key, bounded in COUNTS.items() if key in raw]
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise SpecError(f"{path}: `seeds` must be a non-empty list of whole numbers, got {seeds!r}"[:300])
    checks += [(f"`seeds[{i}]`", seed, SEED) for i, seed in enumerate(seeds)]
    limit = raw.get("limit")
    items = limit.items() if isinstance(limit, dict) else [] if limit is None else [("", limit)]
    checks += [(f"`limit{'.' if task else ''}{task}`", value, integer(1, 1 << 40)) for task, value in items]
    for key, value, bounded in checks:
        try:
            bounded.check(value, key)
        except ValueError as err:
            raise SpecError(f"{path}: {err}") from None


def _resolve(base: Path, path: str) -> str:
    return path if os.path.isabs(path) else str(base / path)


def dataset_files(dataset: Dataset) -> list[Path]:
    """Parquet files of a dataset: a run directory's deduped/ (else curated/), a folder, or a glob."""
    root = Path(dataset.path)
    if root.is_dir():
        for sub in ("deduped", "curated"):
            if (root / sub).is_dir():
                root = root / sub
                break
        files = sorted(root.rglob("*.parquet"))
    else:
        files = sorted(Path(p) for p in glob.glob(dataset.path, recursive=True))
    if not files:
        raise SpecError(f"dataset {dataset.name}: no parquet files at {dataset.path}")
    return files


def check_inputs(spec: AblationSpec, out: Path) -> None:
    """What the steps would find late, checked before --out is made (each a SpecError, one line): every
    dataset file a regular parquet file with a `text` column and apart from --out, every task file there,
    and enough tokens for one global batch (found after a tokenizer and a mixture were built, before)."""
    for d in spec.datasets:
        for file in dataset_files(d):
            check_apart(out, {f"dataset {d.name}": file.parent})
            try:
                with open_regular(file) as handle:
                    names = pq.read_schema(handle).names
            except (OSError, pa.ArrowException) as err:
                raise SpecError(f"dataset {d.name}: {file}: not a readable parquet file ({err})") from None
            if "text" not in names:
                raise SpecError(f"dataset {d.name}: {file}: no `text` column")
    for name, path in spec.tasks.items():
        if not (os.path.isfile(path) or os.path.isdir(path)):
            raise SpecError(f"task {name}: {path} is not a file or a suite folder")
    if spec.tokenizer:  # a FIFO, garbage or a folder holding --out failed in mixtures.build, after --out was begun
        try:
            tok_file = resolve_tokenizer_file(spec.tokenizer)
            load_tokenizer(tok_file)
        except (OSError, ValueError) as err:
            raise SpecError(f"tokenizer: {one_line(err)}") from None
        for d in spec.datasets:  # the mixtures' own rule (mixtures.build), for the folders this run gives them
            check_apart(out / "mixtures" / d.name, {"tokenizer's folder": tok_file.parent})
    check_budget(spec)
    t = spec.train
    batch = spec.seq_len * t.get("micro_batch", 8) * t.get("grad_accum", 1) * t.get("nproc", 1)
    if spec.tokens < batch:
        raise SpecError(f"{spec.tokens} tokens do not fill one global batch ({batch} tokens)")


SEPARATOR_SLACK = 2  # tokens of a document beyond one per byte: the separator its mixture appends, a prefix space


def check_budget(spec: AblationSpec) -> None:
    """Refuse a token budget no dataset can supply, before any work (it failed in mixtures.build, after the
    tokenizer was trained): a token of a tokenizer without a normalizer covers at least one byte of UTF-8
    text, so B bytes in D documents give at most B + SEPARATOR_SLACK x D tokens, which a mixture takes at
    most `max_repetition` times. The bytes are counted from the parquet dictionary indices, so a bomb is
    not expanded, and only until the budget is within reach."""
    if not _one_byte_per_token(spec):
        return  # a normalizer may expand text (NFKC: one character to 18): no bound from the bytes alone
    try:
        need = spec.tokens / spec.max_repetition
    except OverflowError:  # a budget beyond a float's range: no dataset meets it
        need = math.inf
    for d in spec.datasets:
        text, documents = 0, 0
        for file in dataset_files(d):
            try:
                with open_regular(file) as handle:
                    meta = pq.ParquetFile(handle).metadata
                    documents += meta.num_rows
                    reach = need - text - SEPARATOR_SLACK * documents
                    groups = list(range(meta.num_row_groups))
                    limit = int(min(reach, 2**62))  # `tokens` / a tiny max_repetition: an infinite reach
                    text += decoded_dictionary_bytes(handle, "text", groups, limit, per_value=0)
            except (OSError, pa.ArrowException) as err:
                raise SpecError(f"dataset {d.name}: {file}: not a readable parquet file ({err})") from None
            if text + SEPARATOR_SLACK * documents >= need:
                break
        else:
            most = text + SEPARATOR_SLACK * documents
            raise SpecError(
                f"dataset {d.name}: `tokens` {spec.tokens:,} cannot be met: its {documents:,} documents hold at most "
                f"{text:,} bytes of text, so at most {most:,} tokens (one byte or more per token, "
                f"{SEPARATOR_SLACK} per document for separators) x max_repetition {spec.max_repetition:g}; "
                "lower `tokens` or raise `max_repetition`"
            )


def _one_byte_per_token(spec: AblationSpec) -> bool:
    """Whether every token covers at least one byte of the documents' text: the project's byte-level BPE
    (trained when `tokenizer` is not given), or a given tokenizer.json without a normalizer."""
    if not spec.tokenizer:
        return True
    tok = Path(spec.tokenizer)
    try:
        config = json.loads(read_bounded(tok / "tokenizer.json" if tok.is_dir() else tok, MAX_DATA_BYTES))
    except (OSError, ValueError):
        return False  # the steps that read it say what is wrong with it, in their words
    return isinstance(config, dict) and config.get("normalizer") is None


def run_step(args: list[str], log: Path) -> None:
    """One CLI in a subprocess, output to `log`; a failure stops the ablation with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("w") as handle:
        proc = subprocess.run(args, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    if proc.returncode:
        tail = log.read_text()[-1500:]
        raise RuntimeError(f"{' '.join(args[:4])} ... failed ({proc.returncode}); see {log}\n{tail}")


def equal_sample(spec: AblationSpec, out: Path) -> Path:
    """The first `tokenizer_sample_chars` characters of each dataset, one parquet per dataset."""
    out.mkdir(parents=True, exist_ok=True)
    for d in spec.datasets:
        texts, chars = [], 0
        for file in dataset_files(d):
            for text in pq.read_table(file, columns=["text"]).column("text").to_pylist():
                if chars >= spec.tokenizer_sample_chars:
                    break
                texts.append(text[: spec.tokenizer_sample_chars - chars])
                chars += len(texts[-1])
        tmp = out / f".{d.name}.parquet.tmp"
        pq.write_table(pa.table({"text": texts}), tmp)
        os.replace(tmp, out / f"{d.name}.parquet")
    return out


def tokenizer_file(spec: AblationSpec, out: Path) -> Path:
    if spec.tokenizer:
        tok = Path(spec.tokenizer)
        return tok / "tokenizer.json" if tok.is_dir() else tok
    tok_dir = out / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():
        sample = equal_sample(spec, out / "tokenizer_sample")
        print(f"[ablate] tokenizer: BPE {spec.vocab_size} on {spec.tokenizer_sample_chars:,} chars of each dataset")
        run_step(
            [
                sys.executable,
                "-m",
                "tokenizer.train",
                "--input",
                str(sample),
                "--out",
                str(tok_dir),
                "--vocab-size",
                str(spec.vocab_size),
                "--char-budget",
                str(spec.tokenizer_sample_chars * len(spec.datasets)),
                "--quiet",
            ],
            out / "logs" / "tokenizer.log",
        )
    return tok_dir / "tokenizer.json"


def build_mixture(spec: AblationSpec, d: Dataset, tok: Path, out: Path) -> Path:
    mix = out / "mixtures" / d.name
    if (mix / "manifest.json").is_file():
        return mix
    mix_spec = {
        "tokenizer": str(tok),
        "target_tokens": spec.tokens,
        "seq_len": spec.seq_len,
        "seed": 0,
        "sources": [
            {
                "name": d.name,
                "path": [str(f) for f in dataset_files(d)],
                "weight": 1.0,
                "max_repetition": spec.max_repetition,
            }
        ],
    }
    spec_file = out / "mixtures" / f"{d.name}.yaml"
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(yaml.safe_dump(mix_spec))
    print(f"[ablate] mixture {d.name}: {spec.tokens:,} tokens")
    run_step(
        [sys.executable, "-m", "mixtures.build", str(spec_file), "--out", str(mix), "--overwrite", "--quiet"],
        out / "logs" / f"mixture_{d.name}.log",
    )
    return mix


def epoch_steps(spec: AblationSpec, mix: Path) -> tuple[int, int]:
    """(optimizer steps of one epoch, tokens per step), as the trainer will cut the epoch."""
    from mixtures.reader import ShardReader
    from trainer.data import EpochPlan, WindowIndex

    t = spec.train
    index = WindowIndex(ShardReader(mix, verify=False), spec.seq_len)
    plan = EpochPlan(
        index.num_windows, t.get("micro_batch", 8), t.get("grad_accum", 1), t.get("nproc", 1), spec.seq_len
    )
    return plan.steps, plan.tokens_per_step


def task_files(spec: AblationSpec, out: Path) -> dict[str, str]:
    """The task files the runs evaluate on: with `limit`, `limit` rows spread evenly over each JSONL file
    (every k-th: all of BLiMP's paradigms, not the first one's pairs), written once under DIR/tasks/."""
    files = {}
    for name, path in spec.tasks.items():
        n = spec.limit.get(name) if isinstance(spec.limit, dict) else spec.limit
        if not n:
            files[name] = path
            continue
        if name in SUITES:
            files[name] = str(suite_subset(Path(path), n, out / "tasks" / name))
            continue
        if not path.endswith((".jsonl", ".jsonl.gz")):
            raise SpecError(f"limit: task {name} must be a .jsonl(.gz) file to take a spread subset, got {path}")
        dest = out / "tasks" / f"{name}.jsonl"
        if not dest.is_file():
            rows = spread(read_jsonl(path), n)
            atomic_write_text(dest, "".join(json.dumps(r) + "\n" for r in rows))
        files[name] = str(dest)
    return files


def suite_subset(folder: Path, n: int, dest: Path) -> Path:
    """A suite folder (tasks.json + ICL files) with `n` rows spread over each task file, written once; the
    few-shot examples are then drawn from those rows."""
    if not (dest / "tasks.json").is_file():
        manifest = read_manifest(folder)
        for entry in manifest["tasks"]:
            if (folder / entry["file"]).is_file():
                rows = spread(read_jsonl(folder / entry["file"]), n)
                entry["file"] = Path(entry["file"]).name.removesuffix(".gz")
                atomic_write_text(dest / entry["file"], "".join(json.dumps(r) + "\n" for r in rows))
                if entry["num_fewshot"] >= len(rows):
                    raise SpecError(
                        f"limit: {n} rows of {entry['name']} leave too few for {entry['num_fewshot']} shots"
                    )
        atomic_write_text(dest / "tasks.json", json.dumps(manifest, indent=1))
    return dest


def train_run(spec: AblationSpec, d: Dataset, seed: int, mix: Path, tok: Path, out: Path) -> Path:
    """One training run, evaluated on the tasks by the trainer itself (`--eval-every`, `--eval-task`)."""
    run = out / "runs" / d.name / f"seed_{seed}"
    if (run / "hf" / "config.json").is_file():
        return run
    steps, _ = epoch_steps(spec, mix)
    if steps < 1:
        raise SpecError(f"dataset {d.name}: {spec.tokens} tokens do not fill one global batch")
    every = -(-steps // spec.eval_points)  # ceil: at most eval_points evaluations, the last at the end
    t = spec.train
    args = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={t.get('nproc', 1)}",
        str(REPO / "trainer" / "fsdp_train.py"),
        "--shards",
        str(mix),
        "--tokenizer",
        str(tok),
        "--model",
        spec.model,
        "--out",
        str(run),
        "--seed",
        str(seed),
        "--eval-every",
        str(every),
        "--checkpoint-every",
        str(every),
        "--micro-batch",
        str(t.get("micro_batch", 8)),
        "--grad-accum",
        str(t.get("grad_accum", 1)),
        "--lr",
        str(t.get("lr", 3e-3)),
        *[f"--eval-task={name}={path}" for name, path in task_files(spec, out).items()],
        *map(str, t.get("extra", [])),
    ]
    args.append("--resume")  # a killed training continues from its newest checkpoint (none: from step 0)
    print(f"[ablate] train {d.name} seed {seed}: {steps} steps, evaluated every {every}")
    run_step(args, out / "logs" / f"train_{d.name}_seed{seed}.log")
    return run


def run_evaluations(run: Path) -> list[tuple[int, dict[str, Any]]]:
    """(step, task metrics) of every in-training evaluation in the run's metrics.jsonl; a resumed run
    logs the steps after its checkpoint again, and the last record of a step wins."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if "tasks" in record:
            by_step[int(record["step"])] = record["tasks"]
    return sorted(by_step.items())


def final_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """dataset -> metric -> (mean, half range over seeds, seeds) at each run's last evaluation."""
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["dataset"], r["seed"])
        if key not in last or r["step"] > last[key]["step"]:
            last[key] = r
    table: dict[str, dict[str, tuple[float, float, int]]] = {}
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        finals = [r for (d, _), r in last.items() if d == dataset]
        table[dataset] = {}
        for metric in finals[0]["metrics"]:
            vals = [f["metrics"][metric] for f in finals]
            table[dataset][metric] = (statistics.fmean(vals), (max(vals) - min(vals)) / 2, len(vals))
    return table


def plot(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Each metric against tokens; per dataset the seed mean as a line and the seed range as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric in dict.fromkeys(m for r in rows for m in r["metrics"]):
        fig, ax = plt.subplots(figsize=(6, 4))
        for dataset in dict.fromkeys(r["dataset"] for r in rows):
            by_tokens: dict[int, list[float]] = {}
            for r in rows:
                if r["dataset"] == dataset:
                    by_tokens.setdefault(r["tokens"], []).append(r["metrics"][metric])
            xs = sorted(by_tokens)
            ax.plot(xs, [statistics.fmean(by_tokens[x]) for x in xs], marker="o", label=dataset)
            ax.fill_between(xs, [min(by_tokens[x]) for x in xs], [max(by_tokens[x]) for x in xs], alpha=0.2)
        ax.set_xlabel("training tokens")
        ax.set_ylabel(metric)
        ax.legend()
        ax.grid(alpha=0.3)
        path = out / f"{metric}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def decision_html(decided: dict[str, dict[str, Any]]) -> str:
    """Per metric: dataset scores with their seed and checkpoint noise, signal, SNR, agreement, verdict."""
    parts = [
        "<h2>Can it decide?</h2><p>Per metric (evals.decide): each dataset's score (mean over seeds) with its seed "
        "std and checkpoint std (last evaluations); signal = spread between datasets / mean, noise = checkpoint "
        "std / mean, SNR = signal / noise (Signal &amp; Noise); per pair, the share of seed pairs and of "
        "checkpoints that order it alike.</p>"
    ]
    for metric, d in decided.items():
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{score:.4f}</td><td>{d['seed_std'][name]:.4f}</td>"
            f"<td>{d['checkpoint_std'][name]:.4f}</td></tr>"
            for name, score in d["scores"].items()
        )
        pairs = "; ".join(
            f"{html.escape(p['better'])} better of {html.escape(' / '.join(p['pair']))}: seeds "
            f"{100 * p['seed_agreement']:.0f} %, checkpoints {100 * p['checkpoint_agreement']:.0f} %"
            for p in d["pairs"]
        )
        parts.append(
            f"<h3>{html.escape(metric)}: {html.escape(d['verdict'])}</h3><table><tr><th>dataset</th><th>score</th>"
            f"<th>seed std</th><th>checkpoint std</th></tr>{rows}</table><p>signal {d['signal']:.4f}, noise "
            f"{d['noise']:.4f}, SNR {d['snr']:.2f} (over seeds {d['snr_seeds']:.2f}); {pairs}</p>"
        )
    return "".join(parts)


def write_index(
    table: dict[str, dict[str, tuple[float, float, int]]], plots: list[Path], out: Path, decided: str = ""
) -> Path:
    metrics = list(next(iter(table.values())))
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    body = "".join(
        f"<tr><td>{html.escape(d)}</td>"
        + "".join(f"<td>{v[0]:.4f} &plusmn; {v[1]:.4f} (n={v[2]})</td>" for v in (row[m] for m in metrics))
        + "</tr>"
        for d, row in table.items()
    )
    imgs = "".join(f'<figure><img src="plots/{p.name}"><figcaption>{p.stem}</figcaption></figure>' for p in plots)
    page = (
        "<!doctype html><meta charset='utf-8'><title>ablation</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 10px;border-bottom:1px solid #ddd}"
        "figure{display:inline-block}</style><h1>Ablation</h1>"
        "<p>Final evaluation of each run: mean over seeds &plusmn; half the seed range. bpb: lower is better; "
        "accuracies: higher is better.</p>"
        f"<table><tr><th>dataset</th>{head}</tr>{body}</table>{decided}{imgs}"
    )
    path = out / "index.html"
    path.write_text(page)
    return path


def ablate(spec: AblationSpec, out: Path) -> dict[str, Any]:
    out = out.resolve()  # the mixture specs it writes name the tokenizer: relative paths would resolve against them
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_file(spec, out)
    rows = []
    mixtures = {d.name: build_mixture(spec, d, tok, out) for d in spec.datasets}
    steps = {name: epoch_steps(spec, mix)[0] for name, mix in mixtures.items()}
    if max(steps.values()) > 1.01 * min(steps.values()):  # a mixture meets its budget to within a document
        print(f"[ablate] warning: epochs differ by more than 1 %: {steps} steps (long documents, small budget)")
    for d in spec.datasets:
        mix = mixtures[d.name]
        _, per_step = epoch_steps(spec, mix)
        for seed in spec.seeds:
            run = train_run(spec, d, seed, mix, tok, out)
            for step, tasks in run_evaluations(run):
                rows.append(
                    {
                        "dataset": d.name,
                        "seed": seed,
                        "step": step,
                        "tokens": step * per_step,
                        "metrics": headline(tasks),
                    }
                )
    decided = decisions(rows, spec.decision_window, spec.checkpoint_average)
    report = {"runs": rows, "decision": decided}
    write_json_atomic(out / "ablation.json", report)
    table = final_table(rows)
    write_index(table, plot(rows, out / "plots"), out, decision_html(decided))
    for d, row in table.items():
        print(f"[ablate] {d}: " + ", ".join(f"{m} {v[0]:.4f} ± {v[1]:.4f}" for m, v in row.items()))
    for metric, d in decided.items():
        print(f"[ablate] {metric}: SNR {d['snr']:.2f}, ranking {' > '.join(d['ranking'])}: {d['verdict']}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m evals.ablate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("spec", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        check_inputs(spec, args.out)
        _lock = FolderLock(args.out, "ablation").acquire()  # one ablation per folder, until exit
        ablate(spec, args.out)
    except (SpecError, RuntimeError, FolderUnavailable) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'ablation.json'} and {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
