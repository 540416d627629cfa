"""Standalone dedup: ``python -m dedup.run --input DIR --out DIR`` over parquet documents.

Runs the stages of ``build_dedup_stages`` one after another with datatrove's
LocalPipelineExecutor, with ``--executor ray`` as datatrove's Ray executor on a Ray cluster
(``common/ray_cluster/``, as ``pipelines.run``'s), or with ``--executor slurm`` each stage as a Slurm job array
(``common/slurm_arrays.py``); on Ray and Slurm ``--input`` and ``--out`` are on storage every node reaches. Logs and
completion markers go to ``OUT/logs/<stage>``, so rerunning the same command skips finished tasks and
recomputes (or resubmits) only what is missing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor

from common.cli import CPUS, SEED, ArgumentParser, errors_as_one_line, integer, real
from common.executor_errors import ExecutorError
from common.lock import FolderLock, check_apart, check_local_output, check_writable, refuse_being_written
from common.ray_cluster.executor import RayOptions, add_ray_arguments, ray_executor, ray_options
from common.slurm_arrays import (
    SlurmOptions,
    SlurmTasksFailed,
    add_array_arguments,
    array_executor,
    array_options,
    check_array_resources,
)
from dedup.bff_stage import plan_filter
from dedup.clusters import SUMMARY
from dedup.config import BFF_EXPECTED_NGRAMS, DedupConfig
from dedup.index import check_index
from dedup.pipeline import DedupLayout, build_dedup_stages, check_parquet_footers, count_input_files
from dedup.records import CorruptFileError
from dedup.star import add_cluster_arguments, buffer_records_for, cluster_settings, drop_completions
from dedup.text import spacy_english


def run_dedup(
    input_folder: str,
    out: str,
    config: DedupConfig | None = None,
    workers: int = 2,
    tasks: int | None = None,
    write_index: bool = False,
    slurm: SlurmOptions | None = None,
    workers_set: bool = False,
    ray: RayOptions | None = None,
) -> dict:
    """Run every stage (here, on the Ray cluster of ``ray``, or each as a Slurm array with ``slurm``); returns
    the summary (kept/removed counts and where things are). The cluster passes are yielded one by one, each
    after the one before has run, whatever the executor."""
    config = config or DedupConfig()
    layout = DedupLayout(out)
    check_inputs(input_folder, out, config, workers, tasks)
    if config.method == "bff" and count_input_files(input_folder):
        print(plan_filter(config, input_folder).describe(), flush=True)  # pre-flight: the memory BFF will take
    if config.word_split == "spacy" and config.method == "minhash":
        spacy_english()  # import spaCy once here; forked workers inherit it instead of re-importing
    seconds: dict[str, float] = {}
    rerun = drop_completions(lambda name: str(Path(out, "logs", name)))  # a damaged cluster file's task
    forked = slurm is None and ray is None  # the local executor: task processes forked from this one
    for name, steps, n_tasks in build_dedup_stages(input_folder, out, config, tasks, write_index, rerun, forked):
        start = time.perf_counter()
        logs = str(Path(out, "logs", name))
        if slurm is not None:
            executor = array_executor(steps, n_tasks, workers, logs, name, slurm, workers_set)
        elif ray is not None:
            executor = ray_executor(steps, n_tasks, workers, logs, ray, workers_set, stage=name)
        else:
            executor = LocalPipelineExecutor(
                pipeline=steps, tasks=n_tasks, workers=max(1, min(workers, n_tasks)), logging_dir=logs,
                start_method="fork",
            )  # fmt: skip
        executor.run()
        seconds[name] = round(time.perf_counter() - start, 1)
    return summarize(layout, config) | {"seconds": seconds}


def check_inputs(input_folder: str, out: str, config: DedupConfig, workers: int, tasks: int | None) -> None:
    """Everything a run needs, checked before it writes (each a one-line ValueError): counts, the input's
    parquet files, a writable output folder, the earlier dumps' indexes."""
    if workers < 1 or (tasks is not None and tasks < 1):
        raise ValueError(f"--workers and --tasks must be >= 1, got {workers} and {tasks}")
    files = count_input_files(input_folder)
    if tasks is None and not files:
        raise ValueError(f"no parquet files under {input_folder}")
    if tasks is not None and tasks > max(files, 1):  # a task reads whole files: --tasks 1e9 made 1e9 empty tasks
        raise ValueError(f"--tasks must be <= the {files} input parquet files, got {tasks}")
    buffer_records_for(config.cluster_memory_mb)  # an impossible memory cap fails here, not after the signatures
    check_local_output(out, "dedup.run")  # its lock and summary are local files
    check_apart(out, {"input documents": input_folder})  # --out in --input: a rerun would read its own output
    check_writable(out)
    check_parquet_footers(input_folder)
    for index in config.dedup_against:
        try:
            check_index(index, config)
        except CorruptFileError as err:
            raise ValueError(f"--dedup-against: {err}") from None


def summarize(layout: DedupLayout, config: DedupConfig) -> dict:
    passes = (("url", config.url_dedup), ("exact", config.exact_dedup), ("cross_dump", bool(config.dedup_against)))
    kinds = [k for k, on in passes if on] + ["bff" if config.method == "bff" else "minhash"]
    summary: dict = {"deduped": layout.deduped, "removed": {k: layout.removed(k) for k in kinds}}
    for kind in kinds:
        path = Path(layout.clusters(kind), SUMMARY)
        summary[kind] = json.loads(path.read_text()) if path.exists() else None
    filter_stats = Path(layout.run_dir, "logs", "dedup_filter", "stats.json")
    summary["stats"] = {
        "clusters": [str(Path(layout.clusters(k), SUMMARY)) for k in kinds],
        "filter": str(filter_stats),
    }
    return summary


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True, help="folder of parquet documents with `id` and `text`")
    p.add_argument("--out", required=True, help="run folder: minhash/, deduped/, removed/, logs/")
    p.add_argument(
        "--workers",
        type=CPUS,
        default=None,
        help="tasks at once (default: 2; on Slurm: as many as it schedules)",
    )
    p.add_argument("--executor", choices=("local", "ray", "slurm"), default="local", help="where the stages' tasks run")
    p.add_argument("--tasks", type=CPUS, default=None, help="document tasks (default: one per input file)")
    p.add_argument("--exact", action="store_true", help="exact (content hash) dedup before MinHash")
    p.add_argument(
        "--exact-text",
        choices=("raw", "simplified"),
        default="raw",
        help="what --exact hashes: the text as is, or simplify_text of it (case, digits, punctuation ignored)",
    )
    p.add_argument("--url-dedup", action="store_true", help="keep one capture per normalised URL, the newest, first")
    p.add_argument("--write-index", action="store_true", help="persist this dump's MinHash index (minhash/index/)")
    p.add_argument(
        "--dedup-against",
        nargs="+",
        default=[],
        metavar="RUN_DIR",
        help="earlier dumps' run folders (with --write-index): drop documents that have a near-duplicate there",
    )
    add_cluster_arguments(p)
    p.add_argument(
        "--method",
        choices=("minhash", "bff"),
        default="minhash",
        help="near-duplicates by MinHash-LSH (FineWeb) or DCLM's Bloom filter over 13-grams (paragraphs, documents)",
    )
    p.add_argument(
        "--bff-fp-rate",
        type=real(0, 1, open_low=True, open_high=True),
        default=0.01,
        help="BFF: false-positive rate per n-gram (DCLM: 0.01)",
    )
    p.add_argument(
        "--bff-expected-ngrams",
        type=BFF_EXPECTED_NGRAMS,
        default=None,
        help="BFF: n-grams expected (sizes the filter; default: the input's text bytes / 4, an overestimate)",
    )
    p.add_argument(
        "--bff-threshold",
        type=real(0, 1, open_low=True),
        default=0.8,
        help="BFF: contained fraction that removes (DCLM: 0.8)",
    )
    p.add_argument("--n-grams", type=integer(1, 1 << 10), default=5, help="words per shingle")
    p.add_argument("--bands", type=integer(1, 1 << 10), default=14, help="MinHash-LSH buckets")
    p.add_argument("--rows", type=integer(1, 1 << 10), default=8, help="hashes per bucket")
    p.add_argument("--bits", type=int, choices=(32, 64), default=64)
    p.add_argument("--seed", type=SEED, default=1)
    p.add_argument("--group-by", default="dump", help="dedup within groups of this column ('' for none)")
    p.add_argument("--word-split", choices=("spacy", "whitespace"), default="spacy")
    p.add_argument("--shingle-hash", choices=("text", "words"), default="text")
    add_ray_arguments(p.add_argument_group("with --executor ray (each stage datatrove's Ray executor)"))
    add_array_arguments(p.add_argument_group("with --executor slurm (each stage a job array)"))
    a = p.parse_args(argv)
    # bad input is one line (exit 2) before any work: counts, parameters, input, output folder, indexes,
    # the Slurm cluster's partition and sizes; a stage whose Slurm tasks did not all complete, after the work
    with errors_as_one_line(ValueError, SlurmTasksFailed, ExecutorError):
        summary = _run_from_args(a)
    _print_summary(summary)


def _run_from_args(a: argparse.Namespace) -> dict:
    config = DedupConfig(
        n_grams=a.n_grams,
        num_buckets=a.bands,
        hashes_per_bucket=a.rows,
        hash_bits=a.bits,
        seed=a.seed,
        exact_dedup=a.exact,
        exact_text=a.exact_text,
        url_dedup=a.url_dedup,
        dedup_against=tuple(str(Path(r, "minhash", "index").resolve()) for r in a.dedup_against),
        group_by=a.group_by or None,
        word_split=a.word_split,
        shingle_hash=a.shingle_hash,
        method=a.method,
        bff_fp_rate=a.bff_fp_rate,
        bff_expected_ngrams=a.bff_expected_ngrams,
        bff_threshold=a.bff_threshold,
        **cluster_settings(a),
    )
    workers = a.workers if a.workers is not None else 2
    ray = ray_options(a)  # the Ray flags are checked whatever the executor, as pipelines.run does
    if a.executor == "ray":  # Ray workers do not run in this directory
        a.input, a.out = (p if "://" in p else str(Path(p).resolve()) for p in (a.input, a.out))
    check_inputs(a.input, a.out, config, workers, a.tasks)  # before the lock creates the folder
    if "://" not in a.input:  # a run still curating: it deduplicated part of its documents, exit 0
        refuse_being_written([a.input], "dedup.run")
    slurm = None
    if a.executor == "slurm":
        slurm = array_options(a)
        check_array_resources(slurm)
    # one writer per output folder: two runs on one --out used to leave deduped/ empty
    with FolderLock(a.out, "dedup.run"):
        return run_dedup(
            a.input, a.out, config, workers, a.tasks, a.write_index, slurm=slurm, workers_set=a.workers is not None,
            ray=ray if a.executor == "ray" else None,
        )  # fmt: skip


def _print_summary(summary: dict) -> None:
    mh = summary.get("minhash") or summary.get("bff") or {}
    print(f"documents: {mh.get('documents')}  removed as near-duplicates: {mh.get('removed')}")
    if "paragraphs_cut" in mh:
        print(f"paragraphs removed by BFF: {mh['paragraphs_cut']} in {mh['documents_cut']} kept documents")
    for kind in ("url", "exact", "cross_dump"):
        if summary.get(kind):
            print(f"removed as {kind} duplicates: {summary[kind].get('removed')}")
    print(f"kept documents:  {summary['deduped']}")
    for kind, path in summary["removed"].items():
        print(f"removed ({kind}): {path}")
    print(f"stats: {', '.join(summary['stats']['clusters'])}, {summary['stats']['filter']}")
    print("seconds per stage: " + ", ".join(f"{k} {v}" for k, v in summary["seconds"].items()))


if __name__ == "__main__":
    main()
