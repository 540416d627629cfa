"""The trainer on object storage: ``--shards``, ``--tokenizer`` and ``--out`` as fsspec URLs (``s3://...``).

The ranks train as on one machine (the same windows, epoch plan and DCP code, so a run resumed from the
store gives the losses of an uninterrupted one bit for bit); this module moves files between the store and
a node-local scratch folder (``--scratch``, default the system temp dir), so no two
nodes need a shared disk:

- inputs: on each node, local rank 0 downloads the tokenizer and the mixture's manifest into the scratch once;
  the ranks read the shards' windows by byte ranges through a bounded node cache (``trainer/shard_store.py``);
  rank 0 holds a read lease on the mixture's URL for the whole run (common/object_lock.py), so a writer
  that would replace it (an ``--overwrite``) is refused, naming the run;
- checkpoints: DCP writes into the scratch as usual, then every rank uploads the ``.distcp`` files it wrote,
  rank 0 the metadata and trainer state, and rank 0 writes ``checksums.json`` last, with the digests gathered
  from every rank. That object is the commit: an object store has no rename, so a checkpoint whose manifest
  is absent (a save killed mid-upload) is not a checkpoint: never resumed from, removed by the next save;
- resume: the newest committed checkpoint is downloaded into each node's scratch and loaded (and verified
  against its manifest) as a local one;
- ``metrics.jsonl`` and ``run_config.json`` go to the store after every checkpoint and at the end, the HF
  export at the end (its ``config.json`` last: what readers take as "the export is complete").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from common.object_lock import acquire_output_lock, acquire_read_lock
from common.storage import check_store, filesystem, is_remote, join
from common.transfer import download_folder, download_input, upload_files, upload_folder
from mixtures.manifest import sha256_file
from trainer.checkpoint import Checkpointer
from trainer.checkpoint_trust import CHECKSUMS
from trainer.distributed import DistInfo, rank0_verdict
from trainer.rerun import RUN_OUTPUTS, OutputInUse
from trainer.shard_store import shard_fetchers
from trainer.train_config import TrainConfig

_STEP = re.compile(r"^step_(\d{9})$")
RECORDS = ("metrics.jsonl", "run_config.json")  # copied to the store after each checkpoint; fetched to resume
HF_MARKER = "config.json"  # written last: readers (the chain) take it as the sign of a complete export


def _gather(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order (a one-rank run without a group: just this one)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def on_each_node(info: DistInfo, work: Any) -> None:
    """`work()` on each node's local rank 0, the others waiting; a failure there (a missing object, a store
    that refuses) is raised on every rank alike, with the first failing node's one line."""
    error = None
    if info.local_rank == 0:
        try:
            work()
        except (OSError, ValueError) as err:
            error = (type(err).__name__, " ".join(str(err).split()) or type(err).__name__)
    failures = [e for e in _gather(error) if e is not None]
    if failures:
        raise ValueError(f"{failures[0][0]}: {failures[0][1]}")


class StoreCheckpoints:
    """The committed checkpoints under a store URL (``checkpoints/step_*/`` with their ``checksums.json``)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.key = filesystem(self.url)

    def steps(self) -> dict[str, bool]:
        """Every step folder on the store -> whether it is committed (its manifest present)."""
        try:
            entries = self.fs.find(self.key, maxdepth=2)
        except FileNotFoundError:
            return {}
        found: dict[str, bool] = {}
        for entry in entries:
            parts = entry[len(self.key) + 1 :].split("/")
            if _STEP.match(parts[0]):
                found[parts[0]] = found.get(parts[0], False) or parts[-1] == CHECKSUMS
        return found

    def committed(self) -> list[str]:
        return sorted(name for name, done in self.steps().items() if done)

    def remove(self, name: str) -> None:
        """Manifest first, so a reader never takes a half-deleted checkpoint for a committed one."""
        folder = f"{self.key}/{name}"
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(f"{folder}/{CHECKSUMS}")
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(folder, recursive=True)


class StoreCheckpointer(Checkpointer):
    """A Checkpointer whose checkpoints are committed on the store; the local root is a per-node staging copy."""

    def __init__(self, root: Path, keep: int, url: str, info: DistInfo, background: bool = False) -> None:
        super().__init__(root, keep, background)
        self.store, self.info = StoreCheckpoints(url), info

    def after_commit(self, final: Path) -> None:
        """DCP wrote `final` into the scratch (every rank its shards): upload and commit it on the store
        (collective; with --async-checkpoint at the next save or the end of the run)."""
        self.publish(final)

    def publish(self, final: Path) -> None:
        rank = self.info.rank
        written = final if final.is_dir() else final.with_name(final.name + ".tmp")  # other nodes: never renamed
        mine = {p.name: p for p in written.iterdir() if p.name.startswith(f"__{rank}_") and p.suffix == ".distcp"}
        if rank == 0:
            for name in [n for n, done in self.store.steps().items() if not done or n == final.name]:
                self.store.remove(name)  # a save killed mid-upload, or this step saved again after a resume
            mine.update({p.name: p for p in written.iterdir() if p.is_file() and not p.name.endswith(".distcp")})
            mine.pop(CHECKSUMS, None)
        _barrier()
        url = join(self.store.url, final.name)
        upload_files(mine, url)
        digests = {name: sha256_file(path) for name, path in mine.items()}
        everyone = _gather(digests)  # also the barrier: every rank's upload is complete
        if rank == 0:
            files = {name: digest for part in everyone for name, digest in part.items()}
            text = json.dumps({"algorithm": "sha256", "files": files}, indent=1, sort_keys=True) + "\n"
            self.store.fs.pipe_file(f"{self.store.key}/{final.name}/{CHECKSUMS}", text.encode())  # the commit
            for old in self.store.committed()[: -self.keep]:
                self.store.remove(old)
        _barrier()

    def latest(self) -> Path | None:
        """The newest checkpoint committed on the store (its local path; fetched by `load`)."""
        committed = rank0_verdict(self.store.committed, OSError)
        names = _gather(committed)[0]
        return self.root / names[-1] if names else None

    def load(self, path: Path, model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Fetch the committed checkpoint into each node's scratch (unless this node holds it), then load it."""

        def fetch() -> None:
            local = json.loads((path / CHECKSUMS).read_text()) if (path / CHECKSUMS).is_file() else None
            remote = json.loads(self.store.fs.cat_file(f"{self.store.key}/{path.name}/{CHECKSUMS}"))
            if local != remote:
                shutil.rmtree(path, ignore_errors=True)
                download_folder(join(self.store.url, path.name), path)

        on_each_node(self.info, fetch)
        return super().load(path, model, *args, **kwargs)


def _describe_store_run(url: str, present: list[str]) -> str:
    steps = StoreCheckpoints(join(url, "checkpoints")).committed()
    last = f"last checkpoint {steps[-1]}" if steps else "no checkpoint"
    return f"a training run ({', '.join(present)}; {last})"


def check_store_output(url: str, resume: bool, overwrite: bool) -> None:
    """The store's side of `trainer.rerun.check_output`: a previous run there needs --resume or --overwrite."""
    if resume and overwrite:
        raise OutputInUse("--resume and --overwrite exclude each other: continue the run in --out, or replace it")
    if resume or overwrite:
        return
    fs, key = filesystem(url)
    try:
        present = sorted(Path(p.rstrip("/")).name for p in fs.ls(key, detail=False))
    except FileNotFoundError:
        return
    present = [name for name in present if name in RUN_OUTPUTS]
    if present:
        raise OutputInUse(
            f"{url} holds {_describe_store_run(url, present)}; pass --resume to continue it or --overwrite to "
            "replace it, or choose another --out"
        )


def clear_store_outputs(url: str) -> None:
    """--overwrite on the store: the previous run's outputs (checkpoints manifest-first), nothing else."""
    store = StoreCheckpoints(join(url, "checkpoints"))
    for name in store.steps():
        store.remove(name)
    fs, key = filesystem(url)
    for name in RUN_OUTPUTS:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(f"{key.rstrip('/')}/{name}", recursive=True)


class StoreRun:
    """A run whose `--out` (and possibly inputs) live on a store: the local staging and the copies back."""

    def __init__(self, url: str, local: Path, info: DistInfo, origins: dict[str, tuple[Path, str]]) -> None:
        """`origins`: each staged flag's local copy and the URL it came from (--out's included)."""
        self.url, self.local, self.info, self.origins = url, local, info, origins

    def name_origins(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The run's record (run_config.json, trainer_state.json) naming the URLs, not the scratch copies that
        go with the run: a checkpoint exported on its own later finds its tokenizer on the store."""
        flags = dict(meta.get("train_config", {}))
        for name, (_, url) in self.origins.items():
            flags[name] = url
        tokenizer = dict(meta.get("tokenizer", {}))
        if "tokenizer" in self.origins and tokenizer.get("path"):
            copy, url = self.origins["tokenizer"]
            inside = Path(tokenizer["path"]).relative_to(copy.resolve()) if copy.is_dir() else None
            tokenizer["path"] = join(url, inside.as_posix()) if inside is not None else url
        return {**meta, "train_config": flags, "tokenizer": tokenizer}

    def checkpointer(self, keep: int, background: bool = False) -> StoreCheckpointer:
        url = join(self.url, "checkpoints")
        return StoreCheckpointer(self.local / "checkpoints", keep, url, self.info, background)

    def publish_records(self) -> None:
        """metrics.jsonl and run_config.json as they are now (rank 0; after each checkpoint and at the end)."""
        if self.info.rank != 0:
            return
        files = {n: self.local / n for n in RECORDS if (self.local / n).is_file()}
        upload_files(files, self.url)

    def publish_export(self, hf_dir: Path | None) -> None:
        if self.info.rank == 0 and hf_dir is not None:
            upload_folder(hf_dir, join(self.url, "hf"), last=HF_MARKER)
        _barrier()


def _scratch_folder(cfg: TrainConfig) -> Path:
    """This node's staging folder for the run: the same path on every rank of the node, one per --out."""
    base = Path(cfg.scratch) if cfg.scratch is not None else Path(tempfile.gettempdir())
    tag = hashlib.sha256(str(cfg.out).encode()).hexdigest()[:12]
    return base / f"cc2model-train-{tag}"


@contextlib.contextmanager
def staged(cfg: TrainConfig, info: DistInfo) -> Iterator[tuple[TrainConfig, StoreRun | None]]:
    """`cfg` with its URLs replaced by local copies in the node's scratch, and the run's store (None when
    --out is local). Inputs are fetched, the store's --out checked and locked before any training; the
    scratch is removed at the end."""
    urls = {name: str(getattr(cfg, name)) for name in ("shards", "tokenizer", "val_shards", "out")}
    urls = {name: url for name, url in urls.items() if is_remote(url)}
    if not urls:
        yield cfg, None
        return
    for name, url in urls.items():
        what = "--" + name.replace("_", "-")
        rank0_verdict(lambda url=url, what=what: check_store(url, what), ValueError)
    scratch = _scratch_folder(cfg)
    lock = reading = None
    if "out" in urls:
        rank0_verdict(lambda: check_store_output(urls["out"], cfg.resume, cfg.overwrite), OutputInUse)
        lock = rank0_verdict(lambda: acquire_output_lock(urls["out"], "training run"), ValueError)
    try:
        if "shards" in urls:  # a lease for the whole run: no writer replaces the mixture it reads and resumes from
            reading = rank0_verdict(lambda: acquire_read_lock(urls["shards"], "training run"), ValueError)
        fetched: dict[str, str] = {}  # input -> its copy's path inside the scratch (a file or a folder)
        fetchers = shard_fetchers(cfg)  # --shards / --val-shards: the manifest only (read by ranges)

        def fetch() -> None:
            shutil.rmtree(scratch, ignore_errors=True)  # the store is the truth: a previous staging is stale
            scratch.mkdir(parents=True)
            for name, url in urls.items():
                if name in fetchers:
                    fetched[name] = str(fetchers[name](url, scratch / name)[0].relative_to(scratch))
                elif name != "out":
                    fetched[name] = str(download_input(url, scratch / name).relative_to(scratch))
            if "out" in urls and cfg.resume:  # the records the resumed run appends to
                fetch_records(urls["out"], scratch / "out")

        on_each_node(info, fetch)
        # rank 0's names, inside this node's own scratch (each node may have its own --scratch)
        local = {name: scratch / rel for name, rel in _gather(fetched)[0].items()}
        store = None
        if "out" in urls:
            if cfg.overwrite:
                rank0_verdict(lambda: clear_store_outputs(urls["out"]), OSError)
            local["out"] = scratch / "out"
            origins = {name: (local[name], url) for name, url in urls.items()}
            store = StoreRun(urls["out"], local["out"], info, origins)
        yield replace(cfg, **local, resume=cfg.resume, overwrite=False), store
    finally:
        _barrier()
        if info.local_rank == 0:
            shutil.rmtree(scratch, ignore_errors=True)
        if reading is not None:
            reading.release()
        if lock is not None:
            lock.release()


def fetch_records(url: str, local: Path) -> None:
    """The run's records on the store (those present) into `local`, for a resumed run to append to."""
    fs, key = filesystem(url)
    local.mkdir(parents=True, exist_ok=True)
    for name in RECORDS:
        with contextlib.suppress(FileNotFoundError):
            fs.get_file(f"{key.rstrip('/')}/{name}", str(local / name))
