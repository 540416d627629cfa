"""Token shards read from a store by byte ranges (``--shards s3://...``), through a bounded node-local cache.

A run that reads a subset of a large mixture (``--max-steps``, a few nodes of many) should not download all
of it, and a node should not need the mixture on its disk. So ``trainer.store.staged`` copies only the
manifest into the node's scratch, next to a ``store_source.json`` that says where the ``.ds`` files are and
how to read them; ``trainer.prepare`` opens such a folder as a ``StoreShardReader``: the same windows, in
the same order, as ``ShardReader`` gives from a local copy (the epoch plan, the held-out files and exact resume
are those of ``trainer.data``, untouched), each fetched as a range read of its ``.ds`` object.

Reads go by blocks of whole windows (a window never spans two reads), the blocks a batch lacks fetched
together (``cat_ranges``: concurrent on s3fs), kept in ``<scratch>/cache`` as files, least recently used
dropped past the budget (``--shard-cache-mb``; each local rank keeps its share, a block another rank of the
node fetched is read from the cache too). The block size (``--shard-block-kb``; 0: auto) trades bytes for
requests: one window per read fetches exactly the windows the run reads (an epoch reads each window once, so
nothing is fetched twice), a larger block fewer requests for more bytes, which pays only when the cache keeps
the blocks until their other windows are read, i.e. when the mixture fits in the cache. Auto: 1 MiB blocks
when it fits, one window per read otherwise. ``trainer.data.EpochLoader`` asks for the next step's windows
(``prefetch``) once it has read this step's: one background thread fetches them while this step trains.

Objects on a store are immutable once the manifest is written (``mixtures.build`` writes it last), so the
objects' sizes (one listing) are checked against the manifest always, their sha256 with ``--verify-shards``
(rank 0 streams every file once: the whole mixture is read, not stored; ``--no-verify-shards`` reads only
what the run trains on).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from common.bounded_input import read_bounded
from common.storage import filesystem, is_remote
from mixtures.manifest import INDEX_ITEM_SIZE, MANIFEST_NAME, ManifestError
from mixtures.reader import ShardReader

SHARD_INPUTS = ("shards", "val_shards")  # the flags read from a store by ranges
SOURCE_NAME = "store_source.json"  # beside the staged manifest: where the shard files are
AUTO_BLOCK = 1 << 20  # bytes per read when the mixture fits in the cache
_HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class StoreSource:
    """Where a staged mixture's files are, and how this node reads them."""

    url: str
    block_bytes: int  # 0: auto (see the module docstring)
    cache_bytes: int  # this node's budget for the cache of this mixture (0: no cache)


def shard_fetchers(cfg: Any) -> dict[str, Callable[[str, Path], tuple[Path, str]]]:
    """How `trainer.store.staged` stages the run's --shards / --val-shards on a store: (URL, local folder) ->
    (the staged folder, the URL), their manifest only; the node's cache split between them."""
    names = [name for name in SHARD_INPUTS if is_remote(str(getattr(cfg, name, None) or ""))]
    cache = (cfg.shard_cache_mb << 20) // max(1, len(names)) if names else 0

    def stage(url: str, local: Path) -> tuple[Path, str]:
        stage_store_shards(url, local, StoreSource(url, cfg.shard_block_kb << 10, cache))
        return local, url

    return dict.fromkeys(names, stage)


def stage_store_shards(url: str, local: Path, source: StoreSource) -> None:
    """The mixture's manifest into `local`, with its `store_source.json` (`StoreShardReader` reads that folder). A
    URL without a manifest is a FileNotFoundError naming it."""
    fs, key = filesystem(url)
    local.mkdir(parents=True, exist_ok=True)
    try:
        fs.get_file(f"{key.rstrip('/')}/{MANIFEST_NAME}", str(local / MANIFEST_NAME))
    except FileNotFoundError:
        raise FileNotFoundError(f"{url}: no such folder on the store (no {MANIFEST_NAME} under it)") from None
    (local / SOURCE_NAME).write_text(json.dumps(asdict(source)))


def store_source(folder: Path) -> StoreSource | None:
    """The staged mixture's source, None for a local mixture. A malformed one (garbled, or planted in a local
    --shards folder: a list or an unknown key was a traceback, a local path as its URL was read from and a
    cache made inside the mixture) is a ManifestError naming the file, before anything is read or written."""
    path = Path(folder) / SOURCE_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(read_bounded(path))
    except (OSError, ValueError) as err:
        raise ManifestError(f"{path}: unreadable ({err})") from None
    names = [f.name for f in fields(StoreSource)]
    if not isinstance(data, dict) or sorted(data) != sorted(names):
        raise ManifestError(f"{path}: expected an object of {', '.join(names)}, got {str(data)[:200]}")
    counts_ok = all(type(data[name]) is int and data[name] >= 0 for name in ("block_bytes", "cache_bytes"))
    if not isinstance(data["url"], str) or not is_remote(data["url"]) or not counts_ok:
        raise ManifestError(f"{path}: expected a store URL and byte counts >= 0, got {str(data)[:200]}")
    return StoreSource(**data)


@dataclass
class FetchStats:
    """What the reader asked the store for: range reads, their bytes, windows served from the node's cache."""

    requests: int = 0
    bytes: int = 0
    cache_hits: int = 0  # blocks read from the node's cache
    verified_bytes: int = 0


class StoreShardReader(ShardReader):
    """`ShardReader`'s windows from the `.ds` objects on a store (range reads through the node's cache)."""

    def __init__(self, folder: Path, source: StoreSource) -> None:
        super().__init__(folder, verify=False)
        self.source = source
        self.fs, key = filesystem(source.url)
        self.key = key.rstrip("/")
        self.cache = Path(folder) / "cache"
        self.cache.mkdir(exist_ok=True)
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # each local rank keeps its share
        self.budget = source.cache_bytes // ranks
        self.held: OrderedDict[str, int] = OrderedDict()  # the blocks this process fetched, oldest first
        self.held_bytes = 0
        self.stats = FetchStats()
        self.block_tokens = 0  # set by the first read: a whole number of its windows
        self._pool: ThreadPoolExecutor | None = None  # the prefetch's one thread
        self._ahead: Future[dict[tuple[int, int], bytes]] | None = None
        self._ready: dict[tuple[int, int], bytes] = {}  # the current step's blocks, fetched ahead

    @property
    def total_bytes(self) -> int:
        """The `.ds` files' bytes: the mixture's size on the store (its small .index files aside)."""
        return self.total_tokens * self.manifest.token_size

    def object_key(self, file_idx: int) -> str:
        return f"{self.key}/{self.manifest.files[file_idx].path}"

    def check(self, verify: bool) -> None:
        """Every listed file on the store with the manifest's size (one listing); with `verify`, its sha256 too
        (streamed: read whole, not stored). A ManifestError names the first file that differs."""
        try:
            sizes = {name: info["size"] for name, info in self.fs.find(self.key, detail=True).items()}
        except FileNotFoundError:
            sizes = {}
        for i, shard in enumerate(self.manifest.files):
            expected = {"": shard.tokens * self.manifest.token_size, ".index": shard.documents * INDEX_ITEM_SIZE}
            for suffix, want in expected.items():
                found = sizes.get(self.object_key(i) + suffix)
                if found != want:
                    what = "missing" if found is None else f"{found} bytes"
                    raise ManifestError(f"{self.source.url}/{shard.path}{suffix}: {what} on the store, the "
                                        f"manifest says {want} bytes")  # fmt: skip
            if verify and self.digest(i) != shard.sha256:
                raise ManifestError(f"{self.source.url}/{shard.path}: sha256 differs from the manifest")

    def digest(self, file_idx: int) -> str:
        digest = hashlib.sha256()
        with self.fs.open(self.object_key(file_idx), "rb", block_size=_HASH_CHUNK) as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
                self.stats.verified_bytes += len(chunk)
        return digest.hexdigest()

    def _block_tokens(self, length: int) -> int:
        if not self.block_tokens:
            window = length * self.manifest.token_size
            block = self.source.block_bytes
            if block == 0:
                block = AUTO_BLOCK if self.total_bytes <= self.source.cache_bytes else window
            self.block_tokens = max(1, block // window) * length
        return self.block_tokens

    def tokens(self, file_idx: int) -> np.ndarray:
        """All tokens of one file (read through the cache; the trainer reads windows, not files)."""
        return self.window(file_idx, 0, self.manifest.files[file_idx].tokens)

    def doc_ends(self, file_idx: int) -> np.ndarray:
        """From the file's .ds.index object (one GET; the trainer does not read them)."""
        raw = self.fs.cat_file(self.object_key(file_idx) + ".index")
        return np.frombuffer(raw, dtype=np.dtype("<u8"))

    def window(self, file_idx: int, start: int, length: int) -> np.ndarray:
        return self.windows([(file_idx, start, length)])[0]

    def windows(self, wanted: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """(file, start, length) -> tokens, as `ShardReader.window`; the blocks neither fetched ahead
        (`prefetch`) nor in the cache fetched together."""
        if not wanted:
            return []
        ahead = self._settle()
        spans, keys = self._spans(wanted)
        blocks = self._load(keys, ahead)
        step, dtype, size = self.block_tokens, self.manifest.numpy_dtype, self.manifest.token_size
        out = []
        for file_idx, start, end in spans:
            parts = []
            for b in _blocks(start, end, step):
                data, base = blocks[(file_idx, b)], b * step
                lo, hi = max(start, base) - base, min(end, base + step) - base
                parts.append(np.frombuffer(data, dtype=dtype, count=hi - lo, offset=lo * size))
            out.append(np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.empty(0, dtype))
        return out

    def prefetch(self, wanted: list[tuple[int, int, int]]) -> None:
        """Start fetching the blocks of `wanted` (the next step's windows) in a background thread, while this
        step trains; the next `windows` call takes them (and waits for them if they are still on the way)."""
        self._settle()  # a prefetch not read since: its blocks went to the cache (as far as it holds them)
        self._ready = {}
        if not wanted:
            return
        _, keys = self._spans(wanted)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        self._ahead = self._pool.submit(self._load, keys, {})

    def close(self) -> None:
        """Wait for a fetch ahead still on the way (the run ends, or fails): nothing writes into the cache once
        the scratch is removed."""
        if self._ahead is not None:
            with contextlib.suppress(Exception):  # the run is over: what it would have read no longer matters
                self._ahead.result()
            self._ahead = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _settle(self) -> dict[tuple[int, int], bytes]:
        """The blocks fetched ahead for this step (kept for all its micro-batches; errors raised here), after
        which no other thread touches the reader."""
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            self._ready = ahead.result()
        return self._ready

    def _spans(self, wanted: list[tuple[int, int, int]]) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
        """Per window its file and clamped [start, end) tokens; the (file, block) keys they lie in, once each."""
        step = self._block_tokens(wanted[0][2])
        spans, keys = [], {}
        for file_idx, start, length in wanted:
            end = min(start + length, self.manifest.files[file_idx].tokens)
            start = min(start, end)
            spans.append((file_idx, start, end))
            keys.update(dict.fromkeys((file_idx, b) for b in _blocks(start, end, step)))
        return spans, list(keys)

    def _load(self, keys: list[tuple[int, int]], ahead: dict[tuple[int, int], bytes]) -> dict[tuple[int, int], bytes]:
        """Each block from `ahead`, else the cache, else the store (the missing ones in one `_fetch`)."""
        blocks = {key: ahead.get(key) or self._cached(key) for key in keys}
        missing = [key for key, data in blocks.items() if data is None]
        self.stats.cache_hits += sum(1 for key, data in blocks.items() if data is not None and key not in ahead)
        if missing:
            blocks.update(zip(missing, self._fetch(missing, self.block_tokens), strict=True))
        return blocks  # type: ignore[return-value]

    def _name(self, block: tuple[int, int]) -> str:
        return f"{block[0]}-{self.block_tokens}-{block[1]}.blk"

    def _cached(self, block: tuple[int, int]) -> bytes | None:
        if self.budget <= 0:
            return None
        name = self._name(block)
        try:
            data = (self.cache / name).read_bytes()  # this rank's, or another local rank's
        except FileNotFoundError:
            return None  # never fetched, or dropped (by this rank or the one that fetched it)
        if name in self.held:
            self.held.move_to_end(name)
        return data

    def _fetch(self, blocks: list[tuple[int, int]], step: int) -> list[bytes]:
        """The blocks from the store in one `cat_ranges` call, each checked for its length, then cached."""
        size = self.manifest.token_size
        keys, starts, ends = [], [], []
        for file_idx, b in blocks:
            keys.append(self.object_key(file_idx))
            starts.append(b * step * size)
            ends.append(min((b + 1) * step, self.manifest.files[file_idx].tokens) * size)
        datas = self.fs.cat_ranges(keys, starts, ends, on_error="raise")
        for key, start, end, data in zip(keys, starts, ends, datas, strict=True):
            if isinstance(data, Exception):
                raise data
            if len(data) != end - start:
                raise OSError(f"{key}: read {len(data)} bytes at {start}, expected {end - start}")
        self.stats.requests += len(blocks)
        self.stats.bytes += sum(len(d) for d in datas)
        for block, data in zip(blocks, datas, strict=True):
            self._keep(self._name(block), data)
        return datas

    def _keep(self, name: str, data: bytes) -> None:
        """Into the cache (written whole, then renamed: another local rank never reads half a block), oldest
        blocks dropped past the budget."""
        if len(data) > self.budget:
            return
        tmp = self.cache / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.cache / name)
        self.held_bytes += len(data) - self.held.pop(name, 0)
        self.held[name] = len(data)
        while self.held_bytes > self.budget:
            old, freed = self.held.popitem(last=False)
            with contextlib.suppress(FileNotFoundError):
                (self.cache / old).unlink()
            self.held_bytes -= freed

    def fetch_summary(self) -> str | None:
        s = self.stats
        verified = f"; {s.verified_bytes / 2**20:.1f} MiB streamed to verify" if s.verified_bytes else ""
        return (f"shards {self.source.url}: {s.bytes} bytes ({s.bytes / 2**20:.3f} MiB) fetched in {s.requests} "
                f"range reads of {self.block_tokens * self.manifest.token_size} bytes, {s.cache_hits} blocks read "
                f"from the node cache; mixture {self.total_bytes / 2**20:.2f} MiB{verified}")  # fmt: skip


def _blocks(start: int, end: int, step: int) -> range:
    """The blocks (of `step` tokens) that tokens [start, end) lie in."""
    return range(start // step, (end - 1) // step + 1) if end > start else range(0)
