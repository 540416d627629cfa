"""Self-checking binary record files, written atomically.

Layout: 48-byte header (magic, kind, format version, config fingerprint, rank, world size, record
size), fixed-size little-endian records, 32-byte footer (record count, a stage-specific count,
xxh64 of the records, end magic). A file is written as ``<name>.tmp`` and renamed when complete,
so a crash never leaves a file under its final name (there is no fsync: data lost to a power cut
shows up as a checksum error). Readers check every field and the checksum and name the file in
the error, instead of failing later with datatrove's "Hash order error" or silently
deduplicating against garbage.
"""

from __future__ import annotations

import contextlib
import io
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

import numpy as np
import xxhash
from datatrove.io import DataFolder

from common.storage import on_object_store
from dedup.config import FORMAT_VERSION

MAGIC = b"CC2MDDUP"
END_MAGIC = b"DDUPEND\x00"
HEADER = struct.Struct("<8s4sIQIII4x")
FOOTER = struct.Struct("<QQQ8s")
TMP_SUFFIX = ".tmp"
# a record file on an object store at most this big is read whole by one GET and kept (its header, footer and
# records were three ranged GETs, more for each later read); bigger ones are read by ranges as before
WHOLE_READ_BYTES = 64 * 1024
# such files read whole in this process, by place, size and the ETag a listing gave: a second reader in the same
# process sends no GET (the driver counts every band's pairs to plan the clusters, then its cluster task reads
# them: 14 GETs again, bench.object_store); an object rewritten since has another ETag and is read again
KEPT_FILES = 256  # at most WHOLE_READ_BYTES each: 16 MB
_KEPT: OrderedDict[tuple[str, int, str], bytes] = OrderedDict()
_KEPT_LOCK = threading.Lock()


class CorruptFileError(ValueError):
    """A dedup file is truncated, unfinished, corrupt, or from another run/config."""


@dataclass(frozen=True)
class Header:
    kind: bytes  # 4 bytes: b"SIGS", b"RUNS", b"PAIR", b"CLUS"
    fingerprint: int
    rank: int
    world_size: int
    record_size: int

    def pack(self) -> bytes:
        return HEADER.pack(
            MAGIC, self.kind, FORMAT_VERSION, self.fingerprint, self.rank, self.world_size, self.record_size
        )


def streams_to_final_key(folder: DataFolder) -> bool:
    """Whether ``folder`` is on a bucketed object store, whose files (fsspec's buffered uploads) appear only
    once their upload completes and can be discarded before."""
    return on_object_store(folder.fs)


class RecordWriter:
    """Streams numpy records to ``path + '.tmp'``; ``commit`` seals and renames, ``abort`` deletes.

    On an object store (no rename: a "move" is a copy, a delete and four look-ups) the records stream to the
    final key itself: the object becomes visible only when ``commit`` completes its upload, and ``abort``
    discards the upload, so a reader still never sees a partial file."""

    def __init__(self, folder: DataFolder, path: str, header: Header) -> None:
        self.folder = folder
        self.path = path
        self.header = header
        self.direct = streams_to_final_key(folder)
        self.tmp = path if self.direct else path + TMP_SUFFIX
        self._file = folder.open(self.tmp, "wb")
        self._file.write(header.pack())
        self._hash = xxhash.xxh64()
        self.n_records = 0
        self.committed = False

    def write(self, records: np.ndarray) -> None:
        if records.dtype.itemsize != self.header.record_size:
            size = records.dtype.itemsize
            raise ValueError(f"{self.path}: records of {size} bytes, expected {self.header.record_size}")
        data = np.ascontiguousarray(records).view(np.uint8)
        self._hash.update(data)
        self._file.write(data.data)
        self.n_records += len(records)

    @property
    def size(self) -> int:
        """The file's size once committed (header, records, footer): what a receipt records of it, so a file cut
        short later (a disk fault, an object truncated on the store) is seen by a listing."""
        return HEADER.size + self.n_records * self.header.record_size + FOOTER.size

    def commit(self, extra: int = 0) -> None:
        self._file.write(FOOTER.pack(self.n_records, extra, self._hash.intdigest(), END_MAGIC))
        self._file.close()
        if not self.direct:
            self.folder.mv(self.tmp, self.path)
        self.committed = True

    def abort(self) -> None:
        if self.direct:  # the upload never completes: nothing was, or becomes, visible
            with contextlib.suppress(Exception):
                self._file.discard()
            self._file.closed = True  # not committed later by the file's own close (its __del__)
            return
        with contextlib.suppress(Exception):
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.folder.rm(self.tmp)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.committed:
            self.commit()


def commit_all(writers: Sequence[RecordWriter], extra: int = 0) -> None:
    """Commit every writer (the same ``extra`` each). On an object store each commit is an upload, sent
    together (one after another they were a round trip each: a signature task's 14 bands, 0.5 s at 30 ms a
    request, ``bench.object_store --latency-ms 30``); each object still appears only once complete, and this
    returns only once all are (the first failure raised), so what the task writes after them comes after."""
    if len(writers) < 2 or not any(w.direct for w in writers):
        for writer in writers:
            writer.commit(extra=extra)
        return
    with ThreadPoolExecutor(min(len(writers), 16), thread_name_prefix="commit") as pool:
        for done in [pool.submit(w.commit, extra) for w in writers]:
            done.result()


@dataclass
class RecordFile:
    """A validated record file: header fields, counts, and checksummed block reads."""

    folder: DataFolder
    path: str
    header: Header
    n_records: int
    extra: int
    checksum: int
    dtype: np.dtype
    content: bytes | None = None  # the whole file, when it was small enough to read by one request

    @property
    def where(self) -> str:
        return self.folder.resolve_paths(self.path)

    def blocks(self, block_records: int = 1 << 20) -> Iterator[np.ndarray]:
        """Yield the records in order; the checksum is verified once the last block is read."""
        digest = xxhash.xxh64()
        left = self.n_records
        rs = self.dtype.itemsize
        size = HEADER.size + self.n_records * rs + FOOTER.size
        opened = io.BytesIO(self.content) if self.content is not None else open_sized(self.folder, self.path, size)
        with opened as f:
            f.seek(HEADER.size)
            while left:
                n = min(left, block_records)
                raw = f.read(n * rs)
                if len(raw) != n * rs:
                    raise CorruptFileError(f"{self.where}: truncated while reading")
                digest.update(raw)
                left -= n
                if not left and digest.intdigest() != self.checksum:
                    raise CorruptFileError(f"{self.where}: checksum mismatch, the file is corrupt; delete it")
                yield np.frombuffer(raw, dtype=self.dtype)
        if self.n_records == 0 and digest.intdigest() != self.checksum:
            raise CorruptFileError(f"{self.where}: checksum mismatch, the file is corrupt; delete it")

    def read_all(self) -> np.ndarray:
        parts = list(self.blocks())
        return np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)


def open_sized(folder: DataFolder, path: str, size: int) -> IO[bytes]:
    """``folder.open(path, "rb")`` with its size already known: an object store's file then skips the request
    that would look it up (s3fs's ``size=``); a local file needs none. On ``s3://`` (``common/s3_store.py``)
    it also skips the one s3fs sends for the object's ETag to pin its range reads to: a record file checks
    itself (header, footer, size, and the checksum of its records once read)."""
    if folder.is_local():
        return folder.open(path, "rb")
    if getattr(folder.fs, "accepts_open_details", False):
        return folder.open(path, "rb", size=size, details={"size": size})
    return folder.open(path, "rb", size=size)


def listed_version(info: Mapping | None) -> str | None:
    """The ETag of a listing's entry (s3fs's ``ETag``, gcsfs's ``etag``); None when it has none."""
    if not info:
        return None
    version = info.get("ETag") or info.get("etag")
    return str(version) if version else None


def _read_whole(folder: DataFolder, path: str, where: str, size: int, version: str | None) -> bytes:
    """A small file's content by one GET, or the copy this process kept of that version (``_KEPT``)."""
    key = (where, size, version) if version else None
    if key is not None:
        with _KEPT_LOCK:
            if key in _KEPT:
                _KEPT.move_to_end(key)
                return _KEPT[key]
    try:
        content = folder.cat_file(path, **getattr(folder.fs, "small_read_options", {}))
    except FileNotFoundError:
        raise CorruptFileError(f"{where}: missing (was an earlier stage interrupted or a file deleted?)") from None
    if key is not None and len(content) == size:
        with _KEPT_LOCK:
            _KEPT[key] = content
            while len(_KEPT) > KEPT_FILES:
                _KEPT.popitem(last=False)
    return content


def keep_ahead(folder: DataFolder, listed: Mapping[str, Mapping]) -> int:
    """Read the small files of ``listed`` (a listing of ``folder``: name relative to it -> size, ETag) into this
    process's kept copies (``_KEPT``), side by side; how many it read. For a driver about to fork a stage's task
    processes, which inherit them: each band task of the bucket stage read its band's signatures by a GET, one
    round trip after another in each pool worker, and the single cluster task, run in the driver next, read them
    all again (``bench.object_store``). Only when every file is small and all fit (``KEPT_FILES``), else none: a
    copy evicted before its reader comes was a GET for nothing. A file that cannot be read is left to its reader."""
    wanted = [(name, info.get("size"), listed_version(info)) for name, info in sorted(listed.items())]
    if folder.is_local() or not wanted or len(wanted) > KEPT_FILES:
        return 0
    if any(size is None or size > WHOLE_READ_BYTES or version is None for _, size, version in wanted):
        return 0

    def keep(item: tuple[str, int, str]) -> bool:
        name, size, version = item
        with contextlib.suppress(CorruptFileError, OSError):
            return len(_read_whole(folder, name, folder.resolve_paths(name), size, version)) == size
        return False

    with ThreadPoolExecutor(min(len(wanted), 16), thread_name_prefix="keep") as pool:
        return sum(pool.map(keep, wanted))


def open_records(
    folder: DataFolder,
    path: str,
    kind: bytes,
    fingerprint: int,
    dtype: np.dtype,
    rank: int | None = None,
    world_size: int | None = None,
    size: int | None = None,
    version: str | None = None,
) -> RecordFile:
    """Validate header, footer and size of a record file; raise CorruptFileError naming it.

    ``size``: the file's size when the caller has it (from a listing); else looked up (one request on an
    object store: exists, then size, then open's own look-up were three). ``version``: the ETag the same listing
    gave (``listed_version``): a small file this process already read at that version is not fetched again."""
    where = folder.resolve_paths(path)
    try:
        size = folder.size(path) if size is None else size
    except FileNotFoundError:
        raise CorruptFileError(f"{where}: missing (was an earlier stage interrupted or a file deleted?)") from None
    if size < HEADER.size + FOOTER.size:
        raise CorruptFileError(f"{where}: truncated ({size} bytes, smaller than header + footer)")
    content = None
    if size <= WHOLE_READ_BYTES and not folder.is_local():
        content = _read_whole(folder, path, where, size, version)
        if len(content) != size:
            raise CorruptFileError(f"{where}: changed while read ({len(content)} bytes, listed with {size})")
        head, foot = content[: HEADER.size], content[size - FOOTER.size :]
    else:
        with open_sized(folder, path, size) as f:
            head = f.read(HEADER.size)
            f.seek(size - FOOTER.size)
            foot = f.read(FOOTER.size)
    magic, fkind, version, fp, frank, fworld, rsize = HEADER.unpack(head)
    if magic != MAGIC:
        raise CorruptFileError(f"{where}: not a cc2model dedup file (foreign or corrupt header)")
    if fkind != kind:
        raise CorruptFileError(f"{where}: is a {fkind!r} file, expected {kind!r}")
    if version != FORMAT_VERSION:
        raise CorruptFileError(f"{where}: format version {version}, expected {FORMAT_VERSION}; recompute it")
    if fp != fingerprint:
        raise CorruptFileError(
            f"{where}: written with a different dedup config (fingerprint {fp:#x} != {fingerprint:#x}); "
            "delete the dedup folder or use the original config"
        )
    if rsize != dtype.itemsize:
        raise CorruptFileError(f"{where}: record size {rsize}, expected {dtype.itemsize}")
    if rank is not None and frank != rank:
        raise CorruptFileError(f"{where}: written by rank {frank}, expected rank {rank}")
    if world_size is not None and fworld != world_size:
        raise CorruptFileError(f"{where}: written with {fworld} tasks, this run has {world_size}")
    n_records, extra, checksum, end = FOOTER.unpack(foot)
    if end != END_MAGIC:
        raise CorruptFileError(f"{where}: truncated or unfinished (no end marker)")
    expected = HEADER.size + n_records * rsize + FOOTER.size
    if size != expected:
        raise CorruptFileError(f"{where}: truncated or padded: {size} bytes, expected {expected}")
    header = Header(fkind, fp, frank, fworld, rsize)
    return RecordFile(folder, path, header, n_records, extra, checksum, dtype, content)


def is_valid(
    folder: DataFolder,
    path: str,
    kind: bytes,
    fingerprint: int,
    dtype: np.dtype,
    **kw: int,
) -> bool:
    """True when ``path`` exists and passes the header/footer/size checks (not the checksum)."""
    try:
        open_records(folder, path, kind, fingerprint, dtype, **kw)
    except CorruptFileError:
        return False
    return True
