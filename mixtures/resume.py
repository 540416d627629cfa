"""A killed build is rerun by running the same command again; shards of another build are never mixed in.

A build writes `.build.json` (the fingerprint of what it builds: the spec, the tokenizer's sha256 and
every input file's path, size and mtime) into the output folder before its first shard, and the
manifest last. So a folder holding shards but no manifest is a build that did not finish: when its
fingerprint is this build's, its partial shards are removed and the build runs again, which gives
the same shards byte for byte (the plan is a function of the spec, the tokenizer and the inputs,
seeded); otherwise it is someone else's output and is refused like a finished one (`--overwrite`
replaces either). The build itself is redone from the start: tokenization dominates its time and its
temporary parts are not kept across processes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from common.atomic import atomic_write_text
from mixtures.manifest import MANIFEST_NAME
from mixtures.sources import ResolvedSource
from mixtures.spec import MixtureSpec

BUILD_STATE = ".build.json"


def build_fingerprint(spec: MixtureSpec, tokenizer_sha256: str, sources: list[ResolvedSource]) -> str:
    """sha256 of everything the shards are a function of."""
    inputs = [[source.spec.name, _identities(source)] for source in sources]
    record = {"spec": dataclasses.asdict(spec), "tokenizer": tokenizer_sha256, "inputs": inputs}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def _identities(source: ResolvedSource) -> list[list]:
    """Each input file's path with its size and mtime, or, for files still arriving, the stamp of where they
    come from (they may not be there yet)."""
    if source.arriving is not None:
        return [[str(f.resolve()), stamp] for f, stamp in zip(source.files, source.arriving.stamps, strict=True)]
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in source.files]


def _old_outputs(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*.ds*") if p.is_file()) if out.is_dir() else []


def _unfinished_build(out: Path) -> str | None:
    """The fingerprint of the build that left `out` without a manifest, if it left one."""
    try:
        return json.loads((out / BUILD_STATE).read_text())["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_out_dir(out: Path, overwrite: bool, fingerprint: str) -> None:
    """Refuse (FileExistsError, one line) a folder holding a finished build or another build's shards."""
    if overwrite:
        return
    if (out / MANIFEST_NAME).exists():
        raise FileExistsError(f"{out} already holds a finished mixture; pass --overwrite to replace it")
    if _old_outputs(out) and _unfinished_build(out) != fingerprint:
        raise FileExistsError(
            f"{out} holds shards of another build (no manifest, another spec or inputs); "
            "pass --overwrite to replace them"
        )


def start_build(out: Path, overwrite: bool, fingerprint: str) -> bool:
    """Clear what a killed run of this build (or, with `overwrite`, any build) left; record this one.

    Call with the folder locked. Returns True when a killed run of the same build was found."""
    check_out_dir(out, overwrite, fingerprint)
    old = _old_outputs(out)
    resumed = bool(old) and not (out / MANIFEST_NAME).exists() and _unfinished_build(out) == fingerprint
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    for path in old:
        path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / BUILD_STATE, json.dumps({"fingerprint": fingerprint}) + "\n")
    return resumed


def finish_build(out: Path) -> None:
    """The manifest is written: the build is complete, its marker goes."""
    (out / BUILD_STATE).unlink(missing_ok=True)


def abandon_build(out: Path, created: bool) -> None:
    """A build refused after it started (an infeasible spec): leave no trace of it when it made `out`."""
    if created and not _old_outputs(out):
        shutil.rmtree(out, ignore_errors=True)
    else:
        (out / BUILD_STATE).unlink(missing_ok=True)
