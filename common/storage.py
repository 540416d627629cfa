"""Where data lives: a local path or an fsspec URL (``s3://``, ``gs://``, ``az://``, ``file://``, ``memory://``).

Every room names its inputs and outputs through this module, so a run directory may be a bucket as well as
a folder. ``pathlib.Path`` folds ``s3://bucket/run`` into the local folder ``s3:/bucket/run``; ``as_path``
gives a ``pathlib.Path`` for a local path and a ``upath.UPath`` (the same API on fsspec) for a URL, and
``join`` joins without folding. ``check_store`` asks the store the questions a run would otherwise ask only
after hours of work (is the scheme known, does the endpoint answer, are there credentials, does the bucket
exist), each with short timeouts, and turns every failure into one line (``StorageError``).
"""

from __future__ import annotations

import asyncio
import os
import re
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
import fsspec.asyn
from upath import UPath

URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
LOCAL_PROTOCOLS = ("file", "local")
# stores whose first path component is a bucket / container, checked to exist before any work
BUCKETED = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"}
# a store that does not answer is reported in seconds, not after botocore's default minutes of retries
CHECK_OPTIONS = {"s3": {"config_kwargs": {"connect_timeout": 3, "read_timeout": 10, "retries": {"max_attempts": 1}}}}


# Several processes write the same prefixes (tasks on every node, the driver): a cached listing hides the
# objects written since (s3fs caches every listing by default; the driver then misses a task's stats file),
# so listings of a store are asked again each time.
fsspec.config.conf.setdefault("s3", {}).setdefault("use_listings_cache", False)
# s3:// opens s3fs without the bucket and "directory" look-ups a run never needs (common/s3_store.py);
# imported on first use, so s3fs stays an extra
for _scheme in ("s3", "s3a"):
    fsspec.register_implementation(
        _scheme, "common.s3_store.RunStoreS3FileSystem", clobber=True, errtxt="Install s3fs to access S3"
    )
    if _scheme in fsspec.registry:  # s3fs's class already loaded (s3:// used before this import): the name alone
        from common.s3_store import RunStoreS3FileSystem  # would not replace it in this process

        fsspec.register_implementation(_scheme, RunStoreS3FileSystem, clobber=True)


class StorageError(ValueError):
    """A path or URL a run cannot use (unknown scheme, store not answering, no credentials, no bucket); one line."""


def protocol(path: str | os.PathLike[str]) -> str | None:
    """``"s3"`` for ``s3://b/k``; None for a local path (no scheme)."""
    match = URL.match(str(path))
    return match.group(1).lower() if match else None


def is_remote(path: str | os.PathLike[str]) -> bool:
    """True for a URL of a store other than the local disk (``file://`` is local)."""
    scheme = protocol(path)
    return scheme is not None and scheme not in LOCAL_PROTOCOLS


def local_path(path: str | os.PathLike[str]) -> str:
    """A local path without its ``file://`` prefix (other paths unchanged)."""
    text = str(path)
    return text[len("file://") :] if protocol(text) == "file" else text


def as_path(path: str | os.PathLike[str]) -> Path:
    """``pathlib.Path`` for a local path or ``file://`` URL, ``UPath`` (pathlib's API on fsspec) for a URL."""
    if isinstance(path, UPath):
        return path
    if is_remote(path):
        return UPath(str(path))
    return Path(local_path(path))


def join(base: str | os.PathLike[str], *parts: str) -> str:
    """``base/part/...`` as a string, a URL staying a URL (``s3://b/run`` + ``curated`` -> ``s3://b/run/curated``)."""
    if not is_remote(base):
        return str(Path(local_path(base), *parts))
    text = str(base).rstrip("/")
    rest = str(PurePosixPath(*parts)) if parts else ""
    return f"{text}/{rest}" if rest else text


def same_place(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths / URLs name the same folder (local ones resolved, URLs compared as written)."""
    if is_remote(a) or is_remote(b):
        return str(a).rstrip("/") == str(b).rstrip("/")
    return Path(local_path(a)).resolve() == Path(local_path(b)).resolve()


def on_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is a bucketed object store: no rename (a "move" is a copy and a delete), and an object
    appears only once its upload completes (so a writer can stream to the final key, or upload it whole)."""
    protocols = fs.protocol
    return bool(({protocols} if isinstance(protocols, str) else set(protocols)) & BUCKETED)


def filesystem(path: str | os.PathLike[str], **options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system of ``path`` and the path inside it (credentials from the usual variables)."""
    return fsspec.core.url_to_fs(str(path), **options)


def keys_under(fs: fsspec.AbstractFileSystem, key: str) -> list[str]:
    """The keys below the folder ``key`` (full names, sorted; not ``key`` itself), by one listing: ``s3://``'s
    ``files_under`` (``common.s3_store``: ``find`` that finds nothing asks again whether ``key`` is a file, a HEAD
    and another listing), ``find`` on other file systems."""
    return list(details_under(fs, key))


def details_under(fs: fsspec.AbstractFileSystem, key: str) -> dict[str, dict]:
    """``keys_under``'s keys, each with the listing's details (size, ETag), from the same one listing."""
    key = key.rstrip("/")
    found = fs.files_under(key, detail=True) if hasattr(fs, "files_under") else fs.find(key, detail=True)
    return {name: info for name, info in sorted(found.items()) if name.startswith(f"{key}/")}


def scratch_name(path: str | os.PathLike[str]) -> str:
    """A file name for a local copy of ``path``'s object (its last component)."""
    return PurePosixPath(str(path).rstrip("/")).name or "object"


def _describe(err: BaseException) -> str:
    """The store's reason in one line, without botocore's request dump."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


def check_store(path: str | os.PathLike[str], what: str = "--out") -> None:
    """Refuse, before any work, a URL this run could not use; local paths pass (the lock checks them).

    Unknown scheme, the store's client library missing, an endpoint that does not answer, no credentials,
    a bucket that does not exist: each a one-line ``StorageError`` naming ``what`` and the URL."""
    if not is_remote(path):
        return
    scheme = protocol(path)
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise StorageError(f"{what} {path}: unknown storage scheme {scheme}://") from None
    except ImportError as err:
        raise StorageError(f"{what} {path}: {scheme}:// needs a package not installed here ({err})") from None
    if scheme not in BUCKETED:
        return
    options = {"skip_instance_cache": True, **CHECK_OPTIONS.get(scheme, {})}
    try:
        fs, inner = filesystem(path, **options)
        bucket = inner.split("/", 1)[0]
        if not bucket:
            raise StorageError(f"{what} {path}: no bucket in the URL")
        fs.ls(bucket, refresh=True)
        if hasattr(fs, "saw_bucket"):  # s3:// (common.s3_store): the run's writers need not ask again
            fs.saw_bucket(bucket)
    except StorageError:
        raise
    except FileNotFoundError:
        raise StorageError(f"{what} {path}: bucket {bucket!r} does not exist") from None
    except PermissionError as err:
        raise StorageError(f"{what} {path}: access denied to bucket {bucket!r} ({_describe(err)})") from None
    except Exception as err:  # botocore's NoCredentialsError, EndpointConnectionError, ...: named by their text
        kind = type(err).__name__
        if "Credentials" in kind:
            hint = "no credentials (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"
        elif "Connect" in kind or "Timeout" in kind or isinstance(err, OSError):
            hint = f"the store does not answer ({_describe(err)})"
        else:
            hint = _describe(err)
        raise StorageError(f"{what} {path}: {hint}") from None


def read_matching(folder: str | os.PathLike[str], pattern: str) -> list[bytes]:
    """The content of every file ``pattern`` matches in ``folder`` (sorted by name; none when it is missing).

    On a store: one listing and one GET per object, sent together (opening each would add a HEAD apiece and
    wait for each answer in turn)."""
    if not is_remote(folder):
        return [f.read_bytes() for f in sorted(Path(local_path(folder)).glob(pattern))]
    fs, inner = filesystem(folder)
    try:
        listed = fs.ls(inner.rstrip("/"), detail=True)  # a glob would add a HEAD and more listings
    except FileNotFoundError:
        return []
    names = sorted(e["name"] for e in listed if e["type"] == "file" and fnmatch(e["name"].rsplit("/", 1)[-1], pattern))
    return _cat_many(fs, names)


def files_by_folder(folder: str | os.PathLike[str], pattern: str = "*") -> dict[str, list[str]]:
    """The files ``pattern`` matches directly inside each subfolder of ``folder``, by subfolder name, as
    ``<subfolder>/<name>`` (sorted); nothing when ``folder`` is missing.

    On a store: one listing of the whole tree (a listing per subfolder was a round trip each, one after the
    other: the driver asks it of every stage's stats and completions)."""
    grouped: dict[str, list[str]] = {}
    if not is_remote(folder):
        root = Path(local_path(folder))
        found = sorted(p.relative_to(root).as_posix() for p in root.glob(f"*/{pattern}") if p.is_file())
    else:
        fs, inner = filesystem(folder)
        inner = inner.rstrip("/")
        found = [name[len(inner) + 1 :] for name in keys_under(fs, inner)]
    for rel in found:
        sub, _, name = rel.partition("/")
        if name and "/" not in name and fnmatch(name, pattern):
            grouped.setdefault(sub, []).append(rel)
    return grouped


def read_files(folder: str | os.PathLike[str], names: list[str]) -> list[bytes]:
    """The content of ``folder/<name>`` for each name, in order; on a store one GET each, sent together."""
    if not is_remote(folder):
        root = Path(local_path(folder))
        return [(root / name).read_bytes() for name in names]
    fs, inner = filesystem(folder)
    return _cat_many(fs, [f"{inner.rstrip('/')}/{name}" for name in names])


def _cat_many(fs: Any, names: list[str]) -> list[bytes]:
    """Small objects read whole, concurrently where the file system is asynchronous."""
    options = getattr(fs, "small_read_options", {})
    if not fs.async_impl:  # memory://, ...: one at a time
        return [fs.cat_file(name, **options) for name in names]
    return list(fsspec.asyn.sync(fs.loop, _cat_all, fs, names, options)) if names else []


async def _cat_all(fs: Any, names: list[str], options: dict) -> list[bytes]:
    return await asyncio.gather(*(fs._cat_file(name, **options) for name in names))


def read_or_none(path: str | os.PathLike[str]) -> bytes | None:
    """The file's content, None when there is none (on a store one GET; exists, then open, were three)."""
    if not is_remote(path):
        try:
            return Path(local_path(path)).read_bytes()
        except FileNotFoundError:
            return None
    fs, inner = filesystem(path)
    try:
        return fs.cat_file(inner, **getattr(fs, "small_read_options", {}))
    except FileNotFoundError:
        return None
