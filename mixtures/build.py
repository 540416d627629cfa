"""Build a token mixture: tokenize the sources, pick document copies to the budget, write shuffled shards.

    python -m mixtures.build mixture.yaml --out out/mixture [--executor slurm]

(1) every source is tokenized in parallel (pool.py) into temporary parts, which gives exact available token
counts (so `target_tokens: epoch`, one pass over every document, needs no count beforehand); (2) the spec
is refused, with the numbers, if a source would need more than `max_repetition` passes; (3) each document
gets its number of copies (plan.py); (4) all copies of all sources are shuffled together and written as
datatrove shards, then manifest.json (last, atomically).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common.cli import ArgumentParser, errors_as_one_line
from common.lock import FolderLocked, check_apart, check_local_output, locked_folder, refuse_being_written
from common.slurm_job import add_job_arguments, job_options, run_as_job
from common.storage import is_remote
from mixtures.encode import TokenPart
from mixtures.manifest import MANIFEST_NAME, Manifest, ShardFile, SourceStats, TokenizerInfo, write_manifest
from mixtures.parts import tokenize_sources
from mixtures.plan import Demand, InfeasibleMixture, check_feasible, plan_copies, requested_tokens
from mixtures.pool import run_tasks
from mixtures.resume import abandon_build, build_fingerprint, check_out_dir, finish_build, start_build
from mixtures.shuffle import Docs, file_cuts, shuffled_copies, source_docs
from mixtures.sources import Arriving, ResolvedSource, resolve_source
from mixtures.spec import EPOCH, MixtureSpec, load_spec, spec_from_dict
from mixtures.summary import format_summary
from mixtures.writer import WriteTask, shard_file_names, write_shard
from tokenizer.artifacts import load_tokenizer, resolve_tokenizer_file, tokenizer_sha256
from tokenizer.model import EOT

TMP_DIR = ".build-tmp"
SHARD_PREFIX = "shard"

SpecLike = MixtureSpec | dict[str, Any] | str | os.PathLike[str]
# called with the names (relative to the output folder) of a shard's files once they are all complete, in the
# thread that wrote them, before the manifest: what lets a store build upload them while the others are written
ShardWritten = Callable[[tuple[str, ...]], None]


def build_mixture(
    spec: SpecLike,
    out_dir: str | os.PathLike[str],
    overwrite: bool = False,
    progress: bool = True,
    on_shard: ShardWritten | None = None,
    arriving: Mapping[str, Arriving] | None = None,
) -> Manifest:
    """Build `spec` (a MixtureSpec, a dict or a YAML path) into `out_dir`; return the written manifest.
    `on_shard`: see ``ShardWritten`` (not with a ``task_runner`` that runs the writes elsewhere). `arriving`:
    sources (by name) whose files are still being copied in, each tokenized as soon as it is there."""
    spec, sources, tok_file, info, fingerprint = check_build(spec, out_dir, overwrite, arriving)
    out = Path(out_dir)
    created = not out.exists()
    with locked_folder(out, "mixture build"):
        if start_build(out, overwrite, fingerprint) and progress:
            print(f"{out}: an unfinished build of this spec was found; building it again", file=sys.stderr)
        try:
            manifest = _build(spec, out, sources, tok_file, info, progress, on_shard)
        except InfeasibleMixture:
            abandon_build(out, created)
            raise
        finish_build(out)
    return manifest


def check_build(
    spec: SpecLike,
    out_dir: str | os.PathLike[str],
    overwrite: bool = False,
    arriving: Mapping[str, Arriving] | None = None,
) -> tuple[MixtureSpec, list[ResolvedSource], Path, TokenizerInfo, str]:
    """Everything a build checks before it writes (one-line errors): the spec, its sources, the tokenizer and
    `out_dir`; the spec, the sources, the tokenizer file and facts, the build's fingerprint. The files of an
    `arriving` source are checked when each is there, before it is tokenized (still before any shard)."""
    spec = _as_spec(spec)
    out = Path(out_dir)
    sources = [resolve_source(s, spec, (arriving or {}).get(s.name)) for s in spec.sources]
    _refuse_reading_own_output(sources, out)
    tok_file = resolve_tokenizer_file(spec.resolve(spec.tokenizer))
    # shards written into a source or the tokenizer's folder (or a folder holding one) mix with what is read
    for source in sources:
        for folder in {f.parent for f in source.files if not is_remote(str(f))}:
            check_apart(out, {f"source {source.spec.name!r}": folder})
    check_apart(out, {"tokenizer's folder": tok_file.parent})
    info = _tokenizer_info(tok_file, spec)
    fingerprint = build_fingerprint(spec, info.sha256, sources)
    check_out_dir(out, overwrite, fingerprint)  # refuse before the lock creates anything
    return spec, sources, tok_file, info, fingerprint


def _build(
    spec: MixtureSpec,
    out: Path,
    sources: list[ResolvedSource],
    tok_file: Path,
    info: TokenizerInfo,
    progress: bool,
    on_shard: ShardWritten | None = None,
) -> Manifest:
    """Tokenize, plan and write into `out`, which the caller holds locked and has cleared."""
    dtype = "uint16" if info.vocab_size <= 1 << 16 else "uint32"
    tmp = out / TMP_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        append_eos = spec.separator in ("append", "both")
        fast = spec.encoder == "auto"
        parts = tokenize_sources(
            sources, tok_file, info, append_eos, dtype, tmp, spec.workers, progress, fast, spec.max_doc_chars
        )
        docs = [source_docs(parts, i, s.rehydrate) for i, s in enumerate(spec.sources)]
        if spec.is_epoch:
            spec, wanted = _one_epoch(spec, docs)
        else:
            wanted = [requested_tokens(s.weight, spec.target_tokens) for s in spec.sources]
        check_feasible(
            [
                Demand(s.name, s.weight, want, d.tokens, s.max_repetition)
                for s, d, want in zip(spec.sources, docs, wanted, strict=True)
            ]
        )
        rng = np.random.default_rng(spec.seed)
        copies = [plan_copies(d.length, want, rng, d.weight) for d, want in zip(docs, wanted, strict=True)]
        mixed = shuffled_copies(docs, copies, rng)
        tasks = [
            WriteTask(
                out_dir=str(out),
                filename=f"{SHARD_PREFIX}_{i:05d}.ds",
                part_paths=tuple(p.tokens_path for p in parts),
                dtype=dtype,
                tokenizer_name=str(spec.tokenizer),
                part_ids=mixed.part[a:b],
                starts=mixed.start[a:b],
                lengths=mixed.length[a:b],
            )
            for i, (a, b) in enumerate(file_cuts(mixed.length, spec.tokens_per_file))
        ]
        write = write_shard if on_shard is None else partial(_write_and_report, on_shard=on_shard)
        files = run_tasks(write, tasks, spec.workers, desc="writing shards", progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    manifest = _manifest(spec, info, dtype, files, docs, copies, parts)
    write_manifest(manifest, out)
    manifest.root = out
    return manifest


def _write_and_report(task: WriteTask, on_shard: ShardWritten) -> ShardFile:
    shard = write_shard(task)
    on_shard(shard_file_names(task.filename))
    return shard


def _as_spec(spec: SpecLike) -> MixtureSpec:
    if isinstance(spec, MixtureSpec):
        return spec
    if isinstance(spec, dict):
        return spec_from_dict(spec)
    return load_spec(spec)


def _one_epoch(spec: MixtureSpec, docs: list[Docs]) -> tuple[MixtureSpec, list[int]]:
    """`target_tokens: epoch` made concrete once the sources are tokenized: all their tokens, each source
    asking for exactly what it holds, and its share of them recorded as its weight."""
    available = [d.tokens for d in docs]
    total = sum(available)
    if total == 0:
        names = ", ".join(s.name for s in spec.sources)
        raise InfeasibleMixture(f"target_tokens: {EPOCH}, but the sources hold no tokens ({names})")
    sources = tuple(replace(s, weight=a / total) for s, a in zip(spec.sources, available, strict=True))
    return replace(spec, sources=sources, target_tokens=total), available


def _refuse_reading_own_output(sources: list[ResolvedSource], out: Path) -> None:
    target = out.resolve()
    for source in sources:
        if any(f.resolve().parent == target for f in source.files):
            raise ValueError(f"source {source.spec.name!r} reads from the output folder {out}")


def _tokenizer_info(tok_file: Path, spec: MixtureSpec) -> TokenizerInfo:
    tok = load_tokenizer(tok_file)
    eot = tok.token_to_id(EOT)
    if eot is None:
        raise ValueError(f"{tok_file} has no {EOT} token to separate documents with")
    return TokenizerInfo(
        sha256=tokenizer_sha256(tok_file),
        vocab_size=tok.get_vocab_size(),
        bos_id=eot if spec.separator in ("prepend", "both") else None,
        eos_id=eot,
        name_or_path=str(spec.tokenizer),
    )


def _manifest(
    spec: MixtureSpec,
    info: TokenizerInfo,
    dtype: str,
    files: list[ShardFile],
    docs: list[Docs],
    copies: list[np.ndarray],
    parts: list[TokenPart],
) -> Manifest:
    total = sum(f.tokens for f in files)
    sources = {}
    for i, (s, d, c) in enumerate(zip(spec.sources, docs, copies, strict=True)):
        tokens = int((d.length * c).sum())
        sources[s.name] = SourceStats(
            weight=s.weight,
            tokens=tokens,
            documents=int(c.sum()),
            available_tokens=d.tokens,
            repetitions=tokens / d.tokens if d.tokens else 0.0,
            realized_ratio=tokens / total if total else 0.0,
            skipped_too_long=sum(p.skipped_too_long for p in parts if p.source == i),
        )
    return Manifest(
        tokenizer=info,
        token_dtype=dtype,
        token_size=np.dtype(dtype).itemsize,
        seq_len=spec.seq_len,
        seed=spec.seed,
        files=files,
        sources=sources,
        total_tokens=total,
        target_tokens=spec.target_tokens,
    )


def _refuse_sources_being_written(spec: MixtureSpec) -> None:
    """A source a live run is still writing (a run curating, a dedup.run) is refused: the build tokenized the
    documents written so far and exited 0."""
    paths = [spec.resolve(p) for source in spec.sources for p in source.paths]
    refuse_being_written([p for p in paths if not is_remote(p)], "mixture build")


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m mixtures.build", description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="mixture YAML")
    parser.add_argument("--out", required=True, help="output folder for shards and manifest.json")
    parser.add_argument("--overwrite", action="store_true", help="replace shards already in --out")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_job_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.executor == "slurm":  # the same command as one Slurm job of the spec's `workers` CPUs
        with errors_as_one_line(ValueError, OSError, yaml.YAMLError):
            spec = check_build(args.spec, args.out, args.overwrite)[0]
            options = job_options(args, spec.workers)
            sys.exit(run_as_job("mixtures.build", argv, options, Path(args.out) / "slurm", args.yes, args.detach))
    start = time.perf_counter()
    # bad input, each a one-line error (exit 2) raised before anything is written: a spec that is missing
    # (OSError), malformed YAML or keys (SpecError, yaml.YAMLError), a missing tokenizer or source
    # (FileNotFoundError), shards not matching (ManifestError), an --out that holds shards or cannot be
    # made (OSError), an impossible target (InfeasibleMixture), a locked --out (FolderLocked)
    with errors_as_one_line(ValueError, OSError, yaml.YAMLError, FolderLocked):
        check_local_output(args.out, "mixtures.build")
        _refuse_sources_being_written(load_spec(args.spec))
        manifest = build_mixture(args.spec, args.out, overwrite=args.overwrite, progress=not args.quiet)
    seconds = time.perf_counter() - start
    print(format_summary(manifest))
    print(
        f"{manifest.total_tokens / seconds:,.0f} tokens/s in {seconds:.1f}s; manifest: {Path(args.out) / MANIFEST_NAME}"
    )


if __name__ == "__main__":
    main()
