"""Turn a spec source's paths into inputs: curated parquet files, or existing token shards."""

from __future__ import annotations

import glob
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mixtures.encode import TokenPart
from mixtures.manifest import MANIFEST_NAME, ManifestError, read_manifest
from mixtures.spec import MixtureSpec, SourceSpec
from tokenizer.inputs import check_parquet_columns, resolve_parquet


@dataclass(frozen=True)
class Arriving:
    """A parquet source's files while they are still being copied in (a store run's documents, fetched into the
    scratch while the build runs): their local paths in the order the source's folder resolves to, a stamp of
    each (where it comes from: a store's size and ETag; the build's fingerprint takes it in place of the local
    file's size and time) and `wait(path)`, which returns once that file is whole (raising the copy's error).
    The build tokenizes each file as soon as it is there (parts.py), not once all are."""

    files: tuple[Path, ...]
    stamps: tuple[str, ...]
    wait: Callable[[Path], None]

    def wait_all(self) -> None:
        for file in self.files:
            self.wait(file)


@dataclass(frozen=True)
class ResolvedSource:
    """A source's files; `kind` is "parquet" (documents to tokenize) or "shards" (.ds to reuse); `arriving`: the
    files are still being copied in (their reads and checks wait for each, ``Arriving``)."""

    spec: SourceSpec
    kind: str
    files: tuple[Path, ...]
    arriving: Arriving | None = None


def resolve_source(source: SourceSpec, mixture: MixtureSpec, arriving: Arriving | None = None) -> ResolvedSource:
    """Shards when the paths name .ds files or folders holding them, else parquet documents; with `arriving`,
    its files, not read yet (their column check comes when each is there: ``check_arrived``)."""
    if arriving is not None:
        return ResolvedSource(source, "parquet", arriving.files, arriving)
    paths = [mixture.resolve(p) for p in source.paths]
    shards = [f for p in paths for f in _shard_files(p)]
    if shards:
        return ResolvedSource(source, "shards", tuple(sorted(set(shards))))
    try:
        files = tuple(resolve_parquet(paths))
    except FileNotFoundError as err:
        raise FileNotFoundError(f"source {source.name!r}: {err}") from err
    check_parquet_columns(files, source.column, f"source {source.name!r}:")  # before the build is begun
    return ResolvedSource(source, "parquet", files)


def check_arrived(source: ResolvedSource, files: tuple[Path, ...]) -> None:
    """``resolve_source``'s column check of `files` of an arriving source, once they are there."""
    check_parquet_columns(files, source.spec.column, f"source {source.spec.name!r}:")


def check_shard_tokenizer(source: ResolvedSource, tokenizer_sha256: str, token_size: int) -> None:
    """Refuse shards written with another tokenizer (by their manifest) or another token width."""
    for folder in sorted({f.parent for f in source.files}):
        if (folder / MANIFEST_NAME).is_file():
            manifest = read_manifest(folder, verify=True)
            if manifest.tokenizer.sha256 != tokenizer_sha256:
                raise ManifestError(
                    f"source {source.spec.name!r}: shards in {folder} were written with tokenizer "
                    f"{manifest.tokenizer.sha256[:12]}, the spec's tokenizer is {tokenizer_sha256[:12]}"
                )
    for ds in source.files:
        meta = ds.with_name(ds.name + ".metadata")
        if meta.is_file():
            first = meta.read_text().splitlines()[0] if meta.stat().st_size else ""
            size = first.rsplit("|", 1)[-1]
            if size.isdigit() and int(size) != token_size:
                raise ManifestError(f"{ds}: token size {size} in .metadata, the mixture's is {token_size}")


def _shard_files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.glob("*.ds") if f.is_file() and not f.name.startswith("."))
    if path.endswith(".ds"):
        return [Path(f) for f in glob.glob(path, recursive=True) if Path(f).is_file()]
    return []


def shard_part(ds: Path, source: int, token_size: int, lengths_path: Path) -> TokenPart:
    """Describe an existing .ds file as a token part; its documents keep the separators they have."""
    index = ds.with_name(ds.name + ".index")
    if not index.is_file():
        raise FileNotFoundError(f"{ds}: no .ds.index beside it, so its documents are unknown")
    ends = np.fromfile(index, dtype="<u8").astype(np.int64)
    tokens = ds.stat().st_size // token_size
    if ends.size and ends[-1] != tokens:
        raise ManifestError(f"{index}: last document ends at {ends[-1]}, {ds} holds {tokens} tokens")
    lengths = np.diff(ends, prepend=0)
    np.save(lengths_path, lengths)
    return TokenPart(
        source=source,
        tokens_path=str(ds),
        lengths_path=str(lengths_path),
        cluster_path=None,
        documents=int(lengths.size),
        tokens=int(tokens),
    )
