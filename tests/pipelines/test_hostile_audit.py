"""Hostile arguments and files the earlier tables did not hold (issue 30's second audit), one row per case.

Each row failed before its fix: a traceback, a hang on a FIFO or a 3 GiB file, a report written over the
task file it read, shards or a tokenizer written into the documents they were made from, a check found
only after the output folder was begun. Every row must now end in one `error:` line, exit status 2 and
nothing written anywhere under the test's folders. The CLIs run in-process (`main(argv)`), so the table
costs imports once; the files they are given are made per case: a FIFO (never opened for writing, so a
reader that waits on it hangs), a sparse 3 GiB file, a truncated parquet file, garbage bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.lock import FolderLock, refuse_inside_live_folder
from tests.pipelines.test_bad_inputs import _in_process
from tests.support.cli import REPO
from tests.support.trainer_inputs import synthetic_run_inputs

SAMPLE = str(REPO / "pipelines" / "sample" / "sample.warc.gz")
DCLM = (REPO / "pipelines" / "recipes" / "dclm.yaml").read_text()
MC_LINE = json.dumps({"context": "w1", "choices": ["w2", "w3"], "gold": 0}) + "\n"
TRAIN = ["--shards", "{shards}", "--tokenizer", "{tok}", "--device", "cpu", "--no-bf16"]
SFT = ["--base", "{model}", "--data", "{tmp}/garbage.json", "--device", "cpu", "--no-bf16"]
DEEP_JSON = "[" * 100_000 + "]" * 100_000  # 200 KB: Python's JSON and PyYAML recurse once per level


def _mix(docs: str, **changes: object) -> dict:
    spec = {"tokenizer": "{tok}", "target_tokens": "epoch", "seq_len": 32, "workers": 1,
            "sources": [{"name": "web", "path": docs, "weight": 1}]}  # fmt: skip
    return {**spec, **changes}


def _ablation(path: str, **changes: object) -> dict:
    return {"datasets": [{"name": "a", "path": path}], "tokens": 100_000, "tasks": {}, **changes}


def _costs(**changes: object) -> dict:
    """The shipped cost table with the DCLM recipe's figures changed."""
    table = json.loads((REPO / "pipelines" / "recipes" / "costs.json").read_text())
    return {**table, "dclm": {**table["dclm"], **changes}}


# (id, module, argv, files to write first {name: text or JSON-able}, a word the error line holds)
CASES: list[tuple[str, str, list[str], dict, str]] = [
    # outputs written over, into or around what the run reads
    ("evals-out-is-the-task-file", "evals.run", ["{model}", "--task", "mc={tmp}/mc.jsonl", "--out", "{tmp}/mc.jsonl"],
     {"mc.jsonl": MC_LINE}, "--task mc file"),
    ("evals-out-is-the-model-config", "evals.run",
     ["{model}", "--task", "mc={tmp}/mc.jsonl", "--out", "{model}/config.json"], {"mc.jsonl": MC_LINE}, "model folder"),
    ("dedup-out-is-the-input", "dedup.run", ["--input", "{docs}", "--out", "{docs}"], {}, "apart"),
    ("dedup-out-inside-the-input", "dedup.run", ["--input", "{docs}", "--out", "{docs}/dd"], {}, "apart"),
    ("tokenizer-out-inside-the-input", "tokenizer.train", ["--input", "{docs}", "--out", "{docs}/tok", "--quiet"], {},
     "apart"),
    ("tokenizer-out-holds-the-input", "tokenizer.train", ["--input", "{docs}", "--out", "{docs}/..", "--quiet"], {},
     "apart"),
    ("mixture-out-is-the-source", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{docs}", "--quiet"],
     {"mix.yaml": _mix("{docs}")}, "output folder"),
    ("mixture-out-is-the-tokenizer-folder", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tokdir}", "--quiet"],
     {"mix.yaml": _mix("{docs}")}, "apart"),
    ("train-out-inside-the-shards", "trainer.fsdp_train", [*TRAIN, "--out", "{shards}/run"], {}, "apart"),
    ("ablate-out-inside-a-dataset", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{docs}/ablation"],
     {"spec.yaml": _ablation("{docs}")}, "apart"),
    ("plot-out-is-the-log", "trainer.plot", ["{tmp}/m.jsonl", "--out", "{tmp}/m.jsonl"],
     {"m.jsonl": '{"step": 1, "loss": 2.0}\n'}, "the log itself"),
    ("generate-out-is-the-model-config", "evals.generate",
     ["{model}", "--prompt", "w1", "--out", "{model}/config.json"], {}, "model folder"),
    ("generate-out-a-folder", "evals.generate", ["{model}", "--prompt", "w1", "--out", "{tmp}/folder"], {},
     "is a folder"),
    ("quality-out-is-a-training-file", "classifiers.train_quality", ["--positive", "{docs}/00000.parquet",
     "--negative", "{docs}", "--out", "{docs}/00000.parquet"], {}, "input"),  # fmt: skip
    ("plot-log-is-a-link-loop", "trainer.plot", ["{tmp}/loop", "--out", "{tmp}/o.png"], {}, "loop"),
    ("export-checkpoint-is-a-link-loop", "trainer.export_hf", ["--checkpoint", "{tmp}/loop", "--out", "{tmp}/hf"], {},
     "loop"),
    # a URL --out to a command that writes a local folder: it made ./s3:/bucket/... and exited 0
    ("mixture-out-a-url", "mixtures.build", ["{tmp}/mix.yaml", "--out", "s3://bucket/mix", "--quiet"],
     {"mix.yaml": _mix("{docs}")}, "not a URL"),
    ("tokenizer-out-a-url", "tokenizer.train", ["--input", "{docs}", "--out", "s3://bucket/tok", "--quiet"], {},
     "not a URL"),
    ("dedup-out-a-url", "dedup.run", ["--input", "{docs}", "--out", "s3://bucket/dd"], {}, "not a URL"),
    ("export-out-a-url", "trainer.export_hf", ["--checkpoint", "{tmp}/c", "--out", "s3://bucket/hf"], {}, "not a URL"),
    # FIFOs and a sparse 3 GiB file: refused at once, never waited on or read whole
    ("run-sft-3gib", "pipelines.run", [SAMPLE, "--out", "{tmp}/out", "--train", "--sft", "{tmp}/huge"], {}, "--sft"),
    ("plan-costs-fifo", "pipelines.plan", ["sample", "--costs", "{tmp}/fifo"], {}, "FIFO"),
    ("plan-costs-dev-zero", "pipelines.plan", ["sample", "--costs", "/dev/zero"], {}, "regular"),
    ("plot-log-fifo", "trainer.plot", ["{tmp}/fifo", "--out", "{tmp}/o.png"], {}, "FIFO"),
    ("plot-log-3gib", "trainer.plot", ["{tmp}/huge", "--out", "{tmp}/o.png"], {}, "refused"),
    ("export-tokenizer-fifo", "trainer.export_hf", ["--checkpoint", "{tmp}/c", "--out", "{tmp}/hf", "--tokenizer",
     "{tmp}/fifo"], {}, "no tokenizer file"),  # fmt: skip
    ("export-tokenizer-dev-zero", "trainer.export_hf", ["--checkpoint", "{tmp}/c", "--out", "{tmp}/hf",
     "--tokenizer", "/dev/zero"], {}, "no tokenizer file"),  # fmt: skip
    ("generate-gsm8k-3gib", "evals.generate", ["{model}", "--gsm8k", "{tmp}/huge", "--device", "cpu"], {}, "refused"),
    ("tokenizer-evaluate-text-fifo", "tokenizer.evaluate", ["--tokenizer", "{tok}", "--text", "{tmp}/fifo"], {},
     "--text"),
    ("ablate-dataset-fifo", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{root}/ablate-out"],
     {"spec.yaml": _ablation("{tmp}/fifo")}, "FIFO"),
    ("harness-task-binary", "evals.harness", ["{model}", "--task", "mc={tmp}/garbage.json", "--out", "{tmp}/h.json"],
     {}, "--task mc"),
    ("harness-task-fifo", "evals.harness", ["{model}", "--task", "mc={tmp}/fifo", "--out", "{tmp}/h.json"], {},
     "regular file"),
    # an 824-byte parquet file whose text decodes to 20 GB (one dictionary entry of 1 MB, 20,000 rows)
    ("dedup-parquet-bomb", "dedup.run", ["--input", "{tmp}/bomb", "--out", "{tmp}/out"], {}, "decompression bomb"),
    ("tokenizer-parquet-bomb", "tokenizer.train", ["--input", "{tmp}/bomb", "--out", "{tmp}/tok", "--quiet"], {},
     "decompression bomb"),
    ("mixture-parquet-bomb", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tmp}/out", "--quiet"],
     {"mix.yaml": _mix("{tmp}/bomb")}, "decompression bomb"),
    # garbled files: one line naming the file, before anything is written
    ("dedup-truncated-parquet", "dedup.run", ["--input", "{tmp}/trunc", "--out", "{tmp}/out"], {}, "parquet"),
    ("mixture-source-truncated-parquet", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tmp}/out", "--quiet"],
     {"mix.yaml": _mix("{tmp}/trunc")}, "parquet"),
    ("mixture-tokenizer-garbage", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{root}/mix-out", "--quiet"],
     {"mix.yaml": _mix("{docs}", tokenizer="{tmp}/garbage.json")}, "not a tokenizer"),
    ("tokenizer-column-missing", "tokenizer.train", ["--input", "{docs}", "--out", "{tmp}/tok", "--column", "nocolumn"],
     {}, "nocolumn"),
    ("ablate-dataset-garbage", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{tmp}/trunc")}, "parquet"),
    ("inspect-run-json-garbage", "pipelines.inspect", ["{tmp}/r"], {"r/run.json": "\0x", "r/stats.json": "{}"},
     "run.json"),
    ("inspect-stats-a-list", "pipelines.inspect", ["{tmp}/r"], {"r/run.json": "{}", "r/stats.json": "[1]"}, "list"),
    ("report-stats-without-stages", "pipelines.report.write", ["{tmp}/r"], {"r/run.json": "{}", "r/stats.json": "{}"},
     "stages"),
    ("refilter-run-json-garbage", "pipelines.refilter", ["{tmp}/r", "--recipe", "{tmp}/y.yaml"],
     {"r/run.json": "\0x", "y.yaml": "name: ok\n"}, "run record"),
    ("refilter-run-json-a-list", "pipelines.refilter", ["{tmp}/r", "--recipe", "{tmp}/y.yaml"],
     {"r/run.json": "[]", "y.yaml": "name: ok\n"}, "config.recipe"),
    ("plan-source-not-a-warc", "pipelines.plan", ["{tmp}/garbage.json"], {}, "WARC"),
    ("evals-task-line-a-list", "evals.run", ["{model}", "--task", "mc={tmp}/t.jsonl", "--device", "cpu"],
     {"t.jsonl": "[1, 2]\n"}, "JSON object"),
    # values in range only by the letter, or found after the work
    ("run-tasks-above-the-files", "pipelines.run", [SAMPLE, "--out", "{tmp}/out", "--tasks", "1000000000"], {},
     "--tasks"),
    ("run-ray-memory-nan", "pipelines.run", [SAMPLE, "--out", "{tmp}/out", "--ray-memory-per-task", "nan"], {},
     "--ray-memory-per-task"),
    ("dedup-tasks-above-the-files", "dedup.run", ["--input", "{docs}", "--out", "{tmp}/out", "--tasks", "1000000000"],
     {}, "--tasks"),
    ("dedup-seed-negative", "dedup.run", ["--input", "{docs}", "--out", "{tmp}/out", "--seed", "-1"], {}, "seed"),
    ("train-warmup-negative", "trainer.fsdp_train", [*TRAIN, "--out", "{tmp}/out", "--warmup-steps", "-1"], {},
     "--warmup-steps"),
    ("train-z-loss-nan", "trainer.fsdp_train", [*TRAIN, "--out", "{tmp}/out", "--z-loss", "nan"], {}, "--z-loss"),
    ("train-device-bogus", "trainer.fsdp_train", [*TRAIN[:-3], "--out", "{tmp}/out", "--device", "bogus"], {},
     "--device"),
    ("evals-device-bogus", "evals.run", ["{model}", "--task", "mc={tmp}/mc.jsonl", "--device", "bogus"],
     {"mc.jsonl": MC_LINE}, "--device"),
    ("generate-temperature-nan", "evals.generate", ["{model}", "--prompt", "w1", "--temperature", "nan"], {},
     "--temperature"),
    ("mixture-seed-negative", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tmp}/out", "--quiet"],
     {"mix.yaml": _mix("{docs}", seed=-1)}, "seed"),
    ("mixture-seq-len-huge", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tmp}/out", "--quiet"],
     {"mix.yaml": _mix("{docs}", seq_len=10**12)}, "seq_len"),
    ("mixture-source-name-escape-codes", "mixtures.build", ["{tmp}/mix.yaml", "--out", "{tmp}/out", "--quiet"],
     {"mix.yaml": _mix("{docs}", sources=[{"name": "w\x1b[2J", "path": "{docs}", "weight": 1}])}, "control"),
    ("quality-lr-nan", "classifiers.train_quality", ["--positive", "{docs}", "--negative", "{docs}", "--out",
     "{tmp}/q.bin", "--lr", "nan"], {}, "--lr"),  # fmt: skip
    ("quality-threads-zero", "classifiers.train_quality", ["--positive", "{docs}", "--negative", "{docs}", "--out",
     "{tmp}/q.bin", "--threads", "0"], {}, "--threads"),  # fmt: skip
    ("mup-heads-zero", "trainer.mup_check", ["--n-heads", "0"], {}, "--n-heads"),
    ("mup-json-a-folder", "trainer.mup_check", ["--json", "{tmp}/folder"], {}, "--json"),
    ("plan-gpus-1e12", "trainer.plan", ["--params", "1e9", "--gpus", "1000000000000"], {}, "--gpus"),
    ("slurm-port-70000", "trainer.slurm", ["--rdzv-port", "70000", "--dry-run", "--", *TRAIN[:4], "--out",
     "{tmp}/out"], {}, "--rdzv-port"),  # fmt: skip
    ("ablate-task-name-escapes", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{docs}", tasks={"../x": "{tmp}/mc.jsonl"}), "mc.jsonl": MC_LINE}, "tasks name"),
    ("ablate-tokens-below-one-batch", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{docs}", tokens=100)}, "global batch"),
    ("ablate-tokens-beyond-the-datasets", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{docs}", tokens=10**9, max_repetition=4)}, "cannot be met"),
    ("lid-eval-out-folder-missing", "classifiers.lid_eval", ["--data", "{tmp}/s.jsonl", "--out", "{tmp}/no/l.json"],
     {"s.jsonl": '{"text": "hello", "lang": "en"}\n'}, "--out"),
    # the store surface (issue 30's third audit): a local path where a URL belongs and the other way round
    ("lock-break-a-local-folder", "common.object_lock", ["--break", "{tmp}/folder"], {}, "not a store URL"),
    ("train-scratch-a-url", "trainer.fsdp_train", [*TRAIN, "--out", "{tmp}/out", "--scratch", "s3://bucket/x"], {},
     "--scratch"),
    ("sft-scratch-a-url", "trainer.sft", [*SFT, "--out", "memory://sft/o", "--scratch", "s3://bucket/x"], {},
     "--scratch"),
    ("sft-lr-inf", "trainer.sft", [*SFT, "--out", "{tmp}/out", "--lr", "inf"], {}, "--lr"),
    ("sft-lora-alpha-inf", "trainer.sft", [*SFT, "--out", "{tmp}/out", "--lora-rank", "4", "--lora-alpha", "inf"], {},
     "--lora-alpha"),
    ("sft-device-bogus", "trainer.sft", [*SFT, "--out", "{tmp}/out", "--device", "bogus"], {}, "--device"),
    # evals.ablate's pre-checks: a budget beyond a float was a traceback; an infinite repetition, a garbage
    # tokenizer or one whose folder holds --out failed in mixtures.build, after --out was begun
    ("ablate-tokens-beyond-a-float", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{docs}", tokens=10**400)}, "`tokens` must be a whole number in [1, "),
    ("ablate-max-repetition-inf", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": "datasets: [{name: a, path: '{docs}'}]\ntasks: {}\ntokens: 100000\nmax_repetition: .inf\n"},
     "max_repetition"),
    ("ablate-tokenizer-garbage", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": _ablation("{docs}", tokenizer="{tmp}/garbage.json", max_repetition=100)}, "not a tokenizer"),
    ("ablate-out-inside-the-tokenizers-folder", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tokdir}/ablation"],
     {"spec.yaml": _ablation("{docs}", tokenizer="{tok}", max_repetition=100)}, "tokenizer's folder"),
    # an integer past Python's 4,300-digit limit: a ValueError from PyYAML (decimal), an unprintable count (hex)
    ("ablate-tokens-of-5001-digits", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": "datasets: [{name: a, path: '{docs}'}]\ntasks: {}\ntokens: 1" + "0" * 5000 + "\n"}, "digits"),
    ("ablate-tokens-of-5000-hex-digits", "evals.ablate", ["{tmp}/spec.yaml", "--out", "{tmp}/out"],
     {"spec.yaml": "datasets: [{name: a, path: '{docs}'}]\ntasks: {}\ntokens: 0x" + "f" * 5000 + "\n"}, "digits"),
    # an unknown storage scheme: fsspec's ValueError ("Protocol not known") was a traceback, in pipelines.run
    # after the run folder was begun
    ("plan-cc-base-unknown-scheme", "pipelines.plan", ["CC-MAIN-2024-10", "--cc-base", "nope://x"], {}, "nope"),
    ("run-source-unknown-scheme", "pipelines.run", ["nope://x/a.warc.gz", "--out", "{tmp}/out"], {}, "nope"),
    ("plan-listed-url-unknown-scheme", "pipelines.plan", ["{tmp}/l.paths"], {"l.paths": "nope://x/a.warc.gz\n"},
     "nope"),
    # a BFF recipe's filter size: .nan was a traceback (in pipelines.run after curating), 1.5 was planned and run
    ("plan-bff-expected-ngrams-nan", "pipelines.plan", ["sample", "--recipe", "{tmp}/r.yaml"],
     {"r.yaml": DCLM.replace("bff_expected_ngrams: null", "bff_expected_ngrams: .nan")}, "bff_expected_ngrams"),
    # a hand-edited --costs table: a NaN figure was a traceback in the BFF arithmetic, a negative one a plan
    ("plan-costs-figure-nan", "pipelines.plan", ["sample", "--recipe", "{tmp}/r.yaml", "--costs", "{tmp}/c.json"],
     {"r.yaml": DCLM, "c.json": _costs(bff_ngrams_per_curated_doc=float("nan"))}, "bff_ngrams_per_curated_doc"),
    ("plan-costs-figure-negative", "pipelines.plan", ["sample", "--recipe", "{tmp}/r.yaml", "--costs", "{tmp}/c.json"],
     {"r.yaml": DCLM, "c.json": _costs(peak_rss_mb=-5.0)}, "peak_rss_mb"),
    # --calibrate on a run folder whose records are garbled: the arithmetic's AttributeError was a traceback
    ("plan-calibrate-stages-a-list", "pipelines.plan", ["sample", "--recipe", "{tmp}/r.yaml", "--calibrate", "{tmp}/r"],
     {"r.yaml": DCLM, "r/stats.json": {"stages": []}, "r/report/report.json": {"steps": [], "totals": {
         "html_documents": 10, "kept_documents": 5, "kept_tokens": 100}},
      "r/run.json": {"config": {"recipe": {"name": "dclm"}, "source": {"base": "{tmp}", "paths": ["no.warc.gz"]}}}},
     "--calibrate"),
    ("run-bff-expected-ngrams-fraction", "pipelines.run", [SAMPLE, "--recipe", "{tmp}/r.yaml", "--out", "{tmp}/out"],
     {"r.yaml": DCLM.replace("bff_expected_ngrams: null", "bff_expected_ngrams: 1.5")}, "bff_expected_ngrams"),
    # issue 30's fourth audit (helper 30b). Nesting: a RecursionError traceback from every YAML and JSON reader
    ("recipe-nested-too-deeply", "pipelines.run", [SAMPLE, "--out", "{tmp}/out", "--recipe", "{tmp}/r.yaml"],
     {"r.yaml": "name: x\nrules: " + DEEP_JSON[99_000:101_000] + "\n"}, "nested too deeply"),
    ("evals-task-nested-too-deeply", "evals.run", ["{model}", "--task", "mc={tmp}/mc.jsonl", "--device", "cpu"],
     {"mc.jsonl": DEEP_JSON + "\n"}, "nested too deeply"),
    ("plan-costs-nested-too-deeply", "pipelines.plan", ["sample", "--costs", "{tmp}/c.json"], {"c.json": DEEP_JSON},
     "nested too deeply"),
    ("inspect-stats-nested-too-deeply", "pipelines.inspect", ["{tmp}/r"], {"r/run.json": "{}",
     "r/stats.json": DEEP_JSON}, "nested too deeply"),  # fmt: skip
    # a sparse 3 GiB file as a checkpoint's manifest or a model's config: read whole (3.3 and 4.8 GiB of memory)
    ("export-checksums-3gib", "trainer.export_hf", ["--checkpoint", "{tmp}/c", "--out", "{tmp}/hf"],
     {"c/checksums.json": "@huge"}, "more than"),
    ("evals-model-config-3gib", "evals.run", ["{tmp}/m", "--task", "mc={tmp}/mc.jsonl", "--device", "cpu"],
     {"mc.jsonl": MC_LINE, "m/config.json": "@huge"}, "config.json"),
    # listings: blank lines only, an entry too long for a path (tracebacks), a gzip bomb (read whole)
    ("run-listing-blank", "pipelines.run", ["{tmp}/l.paths", "--out", "{tmp}/out"], {"l.paths": "\n# none\n"},
     "no WARC files listed"),
    ("run-listing-entry-too-long", "pipelines.run", ["{tmp}/l.paths", "--out", "{tmp}/out"],
     {"l.paths": "x" * 5000 + ".warc.gz\n"}, "too long"),
    ("plan-listing-gzip-bomb", "pipelines.plan", ["{tmp}/l.paths.gz"],
     {"l.paths.gz": gzip.compress(b"a" * (65 << 20), 1)}, "more than"),
    # a FIFO named like a document file: dedup.run waited on it for good
    ("dedup-input-fifo-named-parquet", "dedup.run", ["--input", "{tmp}/fifo-docs", "--out", "{tmp}/out"], {},
     "not a regular file"),
    # outputs over what the run reads: the BLiMP reference overwritten; --overwrite erased the --init-from
    # checkpoint inside --out (then failed on it); checkpoints written into the --val-shards
    ("evals-out-is-the-blimp-reference", "evals.run", ["{model}", "--task", "mc={tmp}/mc.jsonl", "--device", "cpu",
     "--blimp-reference", "{tmp}/ref.json", "--out", "{tmp}/ref.json"], {"mc.jsonl": MC_LINE, "ref.json": "{}"},
     "--blimp-reference"),  # fmt: skip
    ("train-overwrite-init-from-inside-out", "trainer.fsdp_train", [*TRAIN, "--out", "{tmp}/o", "--overwrite",
     "--init-from", "{tmp}/o/checkpoints/step_000000001"], {"o/checkpoints/step_000000001/trainer_state.json": "{}"},
     "--init-from"),  # fmt: skip
    ("lid-eval-out-is-the-data", "classifiers.lid_eval", ["--data", "{tmp}/s.jsonl", "--out", "{tmp}/s.jsonl"],
     {"s.jsonl": '{"text": "hello", "lang": "en"}\n'}, "--data"),
    ("train-val-shards-is-out", "trainer.fsdp_train", [*TRAIN, "--out", "{tmp}/v", "--val-shards", "{tmp}/v",
     "--overwrite"], {"v/manifest.json": "{}"}, "--val-shards"),  # fmt: skip
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile-inputs")
    docs = root / "run" / "curated"
    docs.mkdir(parents=True)
    rows = [{"id": str(i), "text": " ".join(f"w{(i * j) % 90 + 1}" for j in range(60))} for i in range(30)]
    pq.write_table(pa.Table.from_pylist(rows), docs / "00000.parquet")
    shards, tok = synthetic_run_inputs(root / "train-inputs", vocab=96, n_docs=40, seq_len=32)
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return {"root": root, "docs": docs, "shards": shards, "tok": tok, "model": model}


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time (the 3 GiB file is not read)."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def _hostile_files(case_tmp: Path, docs: Path) -> None:
    os.mkfifo(case_tmp / "fifo")
    with open(case_tmp / "huge", "wb") as handle:
        handle.truncate(3 << 30)  # sparse: no disk used, 3 GiB of zeros to a reader
    (case_tmp / "loop").symlink_to(case_tmp / "loop")
    (case_tmp / "folder").mkdir()
    (case_tmp / "garbage.json").write_bytes(bytes(range(256)) * 8)
    data = (docs / "00000.parquet").read_bytes()
    (case_tmp / "trunc").mkdir()
    (case_tmp / "trunc" / "00000.parquet").write_bytes(data[: len(data) // 2])
    (case_tmp / "fifo-docs").mkdir()
    os.mkfifo(case_tmp / "fifo-docs" / "00000.parquet")
    (case_tmp / "bomb").mkdir()
    one_mb = pa.array(["word " * 200_000])
    text = pa.DictionaryArray.from_arrays(pa.array([0] * 20_000, pa.int32()), one_mb)
    pq.write_table(pa.table({"id": pa.array(["x"] * 20_000), "text": text}), case_tmp / "bomb" / "00000.parquet",
                   compression="zstd", compression_level=22)  # fmt: skip


def _fill(value: object, names: dict[str, str]) -> object:
    if isinstance(value, str):
        for key, path in names.items():
            value = value.replace("{" + key + "}", path)
        return value
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k if not isinstance(k, str) else _fill(k, names): _fill(v, names) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("module", "argv", "files", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_case_is_one_line_exit_2_and_writes_nothing(
    inputs: dict[str, Path], tmp_path: Path, module: str, argv: list[str], files: dict, needle: str
) -> None:
    _hostile_files(tmp_path, inputs["docs"])
    names = {"tmp": str(tmp_path), **{k: str(v) for k, v in inputs.items()}, "tokdir": str(inputs["tok"].parent)}
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        filled = _fill(content, names)
        if filled == "@huge":
            (tmp_path / name).symlink_to(tmp_path / "huge")
        elif isinstance(filled, bytes):
            (tmp_path / name).write_bytes(filled)
        else:
            (tmp_path / name).write_text(filled if isinstance(filled, str) else json.dumps(filled))
    before = _listing(tmp_path), _listing(inputs["root"])
    code, stderr = _in_process(module, [str(_fill(a, names)) for a in argv])
    lines = stderr.strip().splitlines()
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert needle in lines[0], lines[0]
    assert (_listing(tmp_path), _listing(inputs["root"])) == before


def test_an_export_into_a_live_training_runs_folder_is_refused(inputs: dict[str, Path], tmp_path: Path) -> None:
    """`export_hf --out TRAIN/export` while a training run holds TRAIN (the lock `trainer.output_lock` takes):
    refused in one line naming the run, before the checkpoint is read; once the run is gone it goes on."""
    train = tmp_path / "train"
    argv = ["--checkpoint", str(tmp_path / "no-checkpoint"), "--out", str(train / "export" / "hf")]
    hold = f"from common.lock import FolderLock; FolderLock({str(train)!r}, 'training run').acquire(); print(1)"
    holder = subprocess.Popen([sys.executable, "-c", hold + "; input()"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"  # the lock is held
        before = _listing(tmp_path)
        code, stderr = _in_process("trainer.export_hf", argv)
        assert code == 2 and stderr.count("\n") == 1, stderr
        assert stderr.startswith("error: ") and f"being written by a training run (pid {holder.pid}" in stderr
        assert _listing(tmp_path) == before
        with FolderLock(tmp_path / "own", "training run"):  # a run exporting into its own --out (the PP export)
            refuse_inside_live_folder(tmp_path / "own" / "hf", "export_hf")
    finally:
        holder.kill()
        holder.wait()
    code, stderr = _in_process("trainer.export_hf", argv)  # the run ended: the export's own checks speak
    assert code == 2 and "being written" not in stderr and "not a checkpoint" in stderr, stderr


@contextlib.contextmanager
def _held(folder: Path, what: str) -> Iterator[None]:
    """Another process holding `folder`'s writer lock (as a live run writing it does) for the block."""
    hold = f"from common.lock import FolderLock; FolderLock({str(folder)!r}, {what!r}).acquire(); print(1)"
    holder = subprocess.Popen([sys.executable, "-c", hold + "; input()"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"  # the lock is held
        yield
    finally:
        holder.kill()
        holder.wait()


def test_inputs_being_written_and_outputs_in_use_are_refused(inputs: dict[str, Path], tmp_path: Path) -> None:
    """tokenizer.train, dedup.run and mixtures.build on a run still curating read the documents written so far
    and exited 0; the trainer's --val-shards had no read lock (a rebuild could replace them under it); two
    tokenizer trainings into one --out interleaved their files. Each is refused in one line naming the holder."""
    (inputs["shards"] / ".lock").touch()  # the training's read lock writes its record there
    run = tmp_path / "run"
    shutil.copytree(inputs["docs"], run / "curated")
    shutil.copytree(inputs["shards"], tmp_path / "val")
    (tmp_path / "tok").mkdir()
    (tmp_path / "mix.yaml").write_text(json.dumps(_fill(_mix(str(run / "curated")), {"tok": str(inputs["tok"])})))
    train = [*_fill(TRAIN, {k: str(v) for k, v in inputs.items()}), "--out", str(tmp_path / "out")]
    cases = [
        (run, "pipelines.run", "tokenizer.train", ["--input", str(run), "--out", str(tmp_path / "t"), "--quiet"]),
        (run, "pipelines.run", "dedup.run", ["--input", str(run / "curated"), "--out", str(tmp_path / "dd")]),
        (run, "pipelines.run", "mixtures.build", [str(tmp_path / "mix.yaml"), "--out", str(tmp_path / "m"), "--quiet"]),
        (tmp_path / "tok", "tokenizer training", "tokenizer.train",
         ["--input", str(inputs["docs"]), "--out", str(tmp_path / "tok"), "--quiet"]),
        (tmp_path / "val", "mixture build", "trainer.fsdp_train", [*train, "--val-shards", str(tmp_path / "val")]),
    ]  # fmt: skip
    for held, what, module, argv in cases:
        with _held(held, what):
            before = _unlocked(tmp_path), _unlocked(inputs["root"])
            code, stderr = _in_process(module, argv)
            assert code == 2 and stderr.count("\n") == 1, (module, stderr[-3000:])
            assert stderr.startswith("error: ") and "being written by" in stderr and f"{what} (pid" in stderr, stderr
            assert (_unlocked(tmp_path), _unlocked(inputs["root"])) == before, module


def test_an_export_into_its_tokenizers_folder_keeps_the_tokenizer(tmp_path: Path) -> None:
    """`export_hf --tokenizer OUT/tokenizer.json --out OUT` copied the tokenizer onto itself: shutil's
    SameFileError, a traceback after the weights and config were written. The file is left as it is."""
    from tests.support.sft_inputs import chat_tokenizer_dir, tiny_base

    folder = chat_tokenizer_dir(tmp_path / "model")
    text = (folder / "tokenizer.json").read_text()
    tiny_base(folder, folder)
    assert (folder / "tokenizer.json").read_text() == text
    assert {"model.safetensors", "config.json"} <= {p.name for p in folder.iterdir()}


def _unlocked(root: Path) -> dict[str, tuple[int, int]]:
    return {path: stat for path, stat in _listing(root).items() if not path.endswith("/.lock")}


PLANTED = {"list": "[1, 2]", "local": '{"url": "/etc", "block_bytes": 0, "cache_bytes": 0}'}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_store_source_in_local_shards_is_refused(
    inputs: dict[str, Path], tmp_path: Path, source: str
) -> None:
    """A `store_source.json` (what `trainer.store` stages beside a store mixture's manifest) planted in a local
    --shards folder: a list was a traceback; a local path as its URL was read from, a cache made inside the
    mixture. Refused in one line naming the file, nothing written but the read lock's file."""
    mix = tmp_path / "mix"
    shutil.copytree(inputs["shards"], mix)
    (mix / "store_source.json").write_text(source)
    (mix / ".lock").touch()  # the read lock's file (the reader writes its record there): left out below
    before = _unlocked(tmp_path)
    argv = ["--shards", str(mix), "--tokenizer", str(inputs["tok"]), "--out", str(tmp_path / "out"), *TRAIN[4:]]
    code, stderr = _in_process("trainer.fsdp_train", argv)
    assert code == 2 and stderr.count("\n") == 1 and "store_source.json" in stderr, stderr[-3000:]
    assert _unlocked(tmp_path) == before


def test_sft_inputs_truncated_garbage_or_around_out_stop_it_in_one_line(tmp_path: Path) -> None:
    """trainer.sft on a base whose model.safetensors was cut short (a traceback from safetensors once the run
    had locked --out), with a --tokenizer that is JSON but no tokenizer (a bare Exception from tokenizers),
    with --out inside the base or holding the conversations (it trained there and exited 0), with a LoRA rank
    beyond the base's width (a 128 GB allocation's traceback): one line, before anything is written."""
    from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl

    base = tiny_base(tmp_path / "base", chat_tokenizer_dir(tmp_path / "tok"))
    cut = tmp_path / "cut"
    shutil.copytree(base, cut)
    (cut / "model.safetensors").write_bytes((base / "model.safetensors").read_bytes()[:1000])
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "convs").mkdir()
    data = write_jsonl(tmp_path / "convs" / "train.jsonl", arithmetic_records(8))
    flags = ["--data", str(data), "--out", str(tmp_path / "out"), "--device", "cpu", "--no-bf16"]
    garbage_tokenizer = ["--base", str(base), "--tokenizer", str(tmp_path / "list.json")]
    cases = [(["--base", str(cut)], "model.safetensors"), (garbage_tokenizer, "not a tokenizer"),
             (["--base", str(base), "--out", str(base / "sft")], "--base folder"),
             (["--base", str(base), "--out", str(tmp_path / "convs")], "--data file"),
             (["--base", str(base), "--lora-rank", "1000000000"], "--lora-rank")]  # fmt: skip
    for argv, needle in cases:
        before = _listing(tmp_path)
        code, stderr = _in_process("trainer.sft", [*flags, *argv])  # the last --out given wins
        assert code == 2 and stderr.count("\n") == 1 and needle in stderr, stderr[-3000:]
        assert _listing(tmp_path) == before


def test_a_manifest_naming_files_outside_its_mixture_is_refused(inputs: dict[str, Path], tmp_path: Path) -> None:
    """A mixture's manifest.json whose file paths climb out of it (`../other/00000_shard.ds`): the trainer read
    the files there (checksums and all) and trained, exit 0. Refused in one line before anything is written."""
    shutil.copytree(inputs["shards"], tmp_path / "elsewhere")
    mix = tmp_path / "mix"
    mix.mkdir()
    manifest = json.loads((inputs["shards"] / "manifest.json").read_text())
    for shard in manifest["files"]:
        shard["path"] = f"../elsewhere/{shard['path']}"
    (mix / "manifest.json").write_text(json.dumps(manifest))
    (mix / ".lock").touch()
    before = _unlocked(tmp_path)
    argv = ["--shards", str(mix), "--tokenizer", str(inputs["tok"]), "--out", str(tmp_path / "out"), *TRAIN[4:]]
    code, stderr = _in_process("trainer.fsdp_train", [*argv, "--max-steps", "1"])
    assert code == 2 and stderr.count("\n") == 1 and "not a path inside the mixture" in stderr, stderr[-3000:]
    assert _unlocked(tmp_path) == before
