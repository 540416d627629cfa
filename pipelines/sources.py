"""Resolve a SOURCE argument into WARC files: a crawl id, paths/globs/dirs/listings, or ``sample``.

Everything is checked here, before any work starts: a missing file or an unreadable listing is one
``SourceError`` line.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
from dataclasses import dataclass
from glob import glob, has_magic
from pathlib import Path

DEFAULT_CC_BASE = "https://data.commoncrawl.org"
CRAWL_ID = re.compile(r"^(?:cc-|cc-main-)(\d{4})-(\d{2})$", re.I)
DUMP_IN_PATH = re.compile(r"CC-MAIN-\d{4}-\d{2}")
WARC_SUFFIXES = (".warc", ".warc.gz", ".arc.gz", ".warc.zst")
LISTING_SUFFIXES = (".txt", ".paths", ".paths.gz", ".lst")
# A listing's size once decompressed: a crawl's warc.paths.gz is about 14 MB (90,000 paths); a 300 KB gzip
# bomb of one 300 MB line was read whole (and quoted whole in the error).
MAX_LISTING_BYTES = 64 << 20


class SourceError(ValueError):
    """A source that cannot be read; the message is one line."""


@dataclass(frozen=True)
class ResolvedSource:
    """``base`` (a directory or URL prefix) + ``paths`` relative to it, and the dump they belong to."""

    dump: str
    base: str
    paths: tuple[str, ...]
    description: str


def normalize_crawl_id(text: str) -> str | None:
    """``cc-2024-10`` / ``CC-MAIN-2024-10`` -> ``CC-MAIN-2024-10``; anything else -> None."""
    match = CRAWL_ID.match(text.strip())
    return f"CC-MAIN-{match.group(1)}-{match.group(2)}" if match else None


def _read_listing(location: str) -> list[str]:
    from fsspec import open as fs_open

    compression = "gzip" if location.endswith(".gz") else None
    try:
        with fs_open(location, "rb", compression=compression) as f:
            data = f.read(MAX_LISTING_BYTES + 1)  # bounded: a gzip bomb is not decompressed whole
    except FileNotFoundError as err:
        raise SourceError(_not_found(location, err)) from None
    except (OSError, gzip.BadGzipFile) as err:
        raise SourceError(f"cannot read listing {location}: {err}") from None
    except (ValueError, ImportError) as err:  # fsspec: "Protocol not known: nope", or the scheme's package missing
        raise SourceError(f"cannot read listing {location}: {err}") from None
    if len(data) > MAX_LISTING_BYTES:
        raise SourceError(f"listing {location} holds more than {MAX_LISTING_BYTES:,} bytes (decompressed); refused")
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise SourceError(f"cannot read listing {location}: {err}") from None
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _not_found(location: str, err: FileNotFoundError) -> str:
    """Why a listing could not be opened. fsspec's HTTP file system turns every failure of its HEAD/GET into
    FileNotFoundError(url) with the real one as its cause: a host that does not resolve or answer is said
    as such (`Cannot connect to host ... [Name or service not known]`), not as a missing file."""
    cause = err.__cause__
    status = getattr(cause, "status", None)
    if cause is None or status == 404:
        return f"listing not found{' (HTTP 404)' if status else ''}: {location}"
    reason = f"HTTP {status} {getattr(cause, 'message', '')}".strip() if status else str(cause) or type(cause).__name__
    return f"cannot fetch listing {location}: {reason}"


def resolve_crawl(crawl: str, cc_base: str = DEFAULT_CC_BASE) -> ResolvedSource:
    """A crawl's ``warc.paths.gz`` under ``cc_base`` (Common Crawl's bucket or a mirror with its layout)."""
    base = cc_base.rstrip("/")
    listing = f"{base}/crawl-data/{crawl}/warc.paths.gz"
    try:
        paths = _read_listing(listing)
    except SourceError as err:
        if str(err).startswith("listing not found"):  # the host answered: the crawl id is not there
            raise SourceError(f"no crawl {crawl} under {base}: {err}") from None
        raise
    if not paths:
        raise SourceError(f"{listing} lists no WARC files")
    return ResolvedSource(crawl, base, tuple(paths), f"{crawl} ({len(paths)} WARC files listed in {listing})")


def _once_each(paths: list[str]) -> list[str]:
    """`paths` without a second path to a file already listed (``**`` follows a link loop ``d/loop -> .``
    to the same WARC 40 times), first one kept."""
    firsts: dict[str, str] = {}
    for path in paths:
        firsts.setdefault(path if "://" in path else os.path.realpath(path), path)
    return list(firsts.values())


def _expand(item: str, listings: tuple[str, ...] = ()) -> list[str]:
    """A URL as it is; a glob, a directory, a listing file (entries relative to its folder) or a file -> files.

    A path that exists is that file even when its name looks like a glob (``a[1].warc.gz``); only regular
    files are inputs (a FIFO would block the reader); a listing that lists itself, directly or through
    others (`listings`: those being read), is refused."""
    if "://" in item:
        return [item]
    if has_magic(item) and not os.path.lexists(item):
        found = _once_each(sorted(p for p in glob(item, recursive=True) if os.path.isfile(p)))
        if not found:
            raise SourceError(f"no files match {item}")
        return found
    try:
        return _expand_path(Path(item), listings)
    except OSError as err:  # a name too long for the file system (a 5,000-character listing entry): a traceback
        raise SourceError(f"input {item[:200]}{'...' if len(item) > 200 else ''}: {err.strerror}") from None


def _expand_path(path: Path, listings: tuple[str, ...]) -> list[str]:
    """`_expand` of a local path that is no glob."""
    item = str(path)
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.name.endswith(WARC_SUFFIXES))
        if not found:
            raise SourceError(f"no WARC files (*.warc, *.warc.gz) under {item}")
        return found
    if not path.exists():
        raise SourceError(f"input not found: {item}")
    if not path.is_file():
        raise SourceError(f"input is not a regular file (a FIFO or device is never read): {item}")
    if path.name.endswith(LISTING_SUFFIXES):
        real = os.path.realpath(path)
        if real in listings:
            raise SourceError(f"listing {item} lists itself (directly or through another listing)")
        entries = _read_listing(str(path))
        return [
            f
            for entry in entries
            for f in _expand(entry if "://" in entry else str(path.parent / entry), (*listings, real))
        ]
    return [str(path)]


def resolve_paths(items: list[str], dump: str | None = None) -> ResolvedSource:
    """Local WARC files, globs, directories or listing files (URLs in listings are kept as URLs)."""
    files = _once_each([file for item in items for file in _expand(item)])
    if not files:  # a listing of blank or comment lines only (os.path.commonpath([]) was a traceback)
        raise SourceError(f"no WARC files listed in {', '.join(items)}")
    for name in files:
        if "\n" in name or "\r" in name:  # inputs.txt holds one path per line: this one would split
            raise SourceError(f"input file name holds a line break, rename it: {name!r}")
    remote = [f for f in files if "://" in f]
    if remote and len(remote) != len(files):
        raise SourceError("mixing local files and URLs in one run is not supported; run them separately")
    if remote:
        _check_schemes(remote)
        base = os.path.dirname(os.path.commonprefix(remote)).rstrip("/")
    else:
        files = [os.path.abspath(f) for f in files]
        base = os.path.commonpath([os.path.dirname(f) for f in files])
    rel = tuple(f[len(base) :].lstrip("/") for f in files)
    if not dump:
        dumps = {m.group(0) for f in files for m in [DUMP_IN_PATH.search(f)] if m}
        dump = dumps.pop() if len(dumps) == 1 else local_dump_name(files, base)
    return ResolvedSource(dump, base, rel, f"{len(rel)} WARC file(s) under {base}")


def _check_schemes(urls: list[str]) -> None:
    """Each URL's scheme one fsspec knows (and can load): `nope://x/a.warc.gz` was accepted, the run begun,
    then the reader's ValueError ("Protocol not known") was a traceback."""
    from fsspec import get_filesystem_class

    for scheme in sorted({url.split("://", 1)[0] for url in urls}):
        try:
            get_filesystem_class(scheme)
        except (ValueError, ImportError) as err:
            raise SourceError(f"input {next(u for u in urls if u.startswith(scheme + '://'))}: {err}") from None


def local_dump_name(files: list[str], base: str) -> str:
    """The run folder of WARC files outside Common Crawl's layout, so that runs of different inputs in one
    ``--out`` do not meet in one folder: the one file's name without its WARC suffix, or the name of the folder
    holding them all (``/data/heldout/*.warc.gz`` -> ``heldout``), as a safe name; ``local`` when neither gives one."""
    if len(files) == 1:
        name = os.path.basename(files[0])
        suffix = next((s for s in sorted(WARC_SUFFIXES, key=len, reverse=True) if name.endswith(s)), "")
        name = name[: len(name) - len(suffix)]
    else:
        name = os.path.basename(base.rstrip("/"))
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip("._+-")[:128]
    return name or "local"


def resolve_source(
    sources: list[str], cc_base: str = DEFAULT_CC_BASE, dump: str | None = None, limit_warcs: int | None = None
) -> ResolvedSource:
    """Dispatch on the SOURCE arguments and apply ``--limit-warcs``."""
    if not sources:
        raise SourceError("no SOURCE given (a crawl id like cc-2024-10, WARC paths, or 'sample')")
    if len(sources) == 1 and sources[0] == "sample":
        from pipelines.sample import SAMPLE_WARC

        if not SAMPLE_WARC.is_file():
            raise SourceError(f"bundled sample missing: {SAMPLE_WARC}")
        resolved = ResolvedSource(dump or "sample", str(SAMPLE_WARC.parent), (SAMPLE_WARC.name,), "bundled sample")
    elif len(sources) == 1 and (crawl := normalize_crawl_id(sources[0])):
        resolved = resolve_crawl(crawl, cc_base)
    else:
        resolved = resolve_paths(sources, dump)
    if limit_warcs is not None and limit_warcs < 1:
        raise SourceError("--limit-warcs must be >= 1")
    return dataclasses.replace(resolved, paths=resolved.paths[:limit_warcs])
