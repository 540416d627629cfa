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
  rank 0 the metadata, trainer state and the run's records as they were at the save, and rank 0 writes
  ``checksums.json`` last, with the digests gathered from every rank. That object is the commit: an object
  store has no rename, so a checkpoint whose manifest is absent (a save killed mid-upload) is not a
  checkpoint: never resumed from, removed by the next save. With ``--async-checkpoint`` the upload and the
  commit run in a thread per rank behind DCP's background write, their collectives on a gloo group of their
  own, so training goes on while they run; the next save, a load and the end of the run wait for them;
- resume: the newest committed checkpoint is downloaded into each node's scratch and loaded (and verified
  against its manifest) as a local one;
- ``metrics.jsonl`` and ``run_config.json`` go to the store with every checkpoint (before its commit, so a
  committed checkpoint's records are on the store) and at the end, the HF export at the end (its
  ``config.json`` last: what readers take as "the export is complete").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist
from torch import nn

from common.cli import one_line
from common.object_lock import acquire_output_lock, acquire_read_lock
from common.storage import check_store, filesystem, is_remote, join
from common.transfer import download_folder, download_input, upload_files, upload_folder
from mixtures.manifest import sha256_file
from trainer.checkpoint import Checkpointer
from trainer.checkpoint_trust import CHECKSUMS
from trainer.distributed import DistInfo, rank0_verdict
from trainer.rerun import RUN_OUTPUTS, OutputInUse
from trainer.shard_store import shard_fetchers

_STEP = re.compile(r"^step_(\d{9})$")
RECORDS = ("metrics.jsonl", "run_config.json")  # copied to the store after each checkpoint; fetched to resume
HF_MARKER = "config.json"  # written last: readers (the chain) take it as the sign of a complete export
PRETRAINING_INPUTS = ("shards", "tokenizer", "val_shards")
Fetch = Callable[[str, Path], tuple[Path, str]]  # (URL, local folder) -> (the local copy, the URL it copies)
Config = TypeVar("Config", bound=Any)  # a dataclass of flags with .out, .scratch and .resume (TrainConfig, SFTConfig)


def _gather(value: Any, group: dist.ProcessGroup | None = None) -> list[Any]:
    """Every rank's `value`, in rank order (a one-rank run without a group: just this one)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value, group=group)
    return values


def _barrier(group: dist.ProcessGroup | None = None) -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier(group=group)


def on_each_node(info: DistInfo, work: Any) -> None:
    """`work()` on each node's local rank 0, the others waiting; a failure there (a missing object, a store
    that refuses) is raised on every rank alike, with the first failing node's one line."""
    error = None
    if info.local_rank == 0:
        try:
            work()
        except Exception as err:  # a store gone away is botocore's error, not an OSError: still meet the gather
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


class UploadFailed(OSError):
    """A rank could not upload its part of a checkpoint: the checkpoint is not committed on the store."""


class StoreCheckpointer(Checkpointer):
    """A Checkpointer whose checkpoints are committed on the store; the local root is a per-node staging copy.

    `records`: the run's local folder and URL; its RECORDS, read at each save, are uploaded with the
    checkpoint, before its commit (rank 0)."""

    def __init__(
        self,
        root: Path,
        keep: int,
        url: str,
        info: DistInfo,
        background: bool = False,
        records: tuple[Path, str] | None = None,
    ) -> None:
        super().__init__(root, keep, background)
        self.store, self.info, self.records = StoreCheckpoints(url), info, records
        self._records_at_save: dict[str, bytes] = {}
        self._upload_group: dist.ProcessGroup | None = None  # the background uploads' collectives
        self._uploader: ThreadPoolExecutor | None = None

    def save(self, step: int, *args: Any, **kwargs: Any) -> Path:
        """As Checkpointer.save; the run's records are read now (after the previous save is published), so the
        ones committed with this checkpoint hold every step up to it."""
        self.finish()
        self._records_at_save = self._read_records()
        return super().save(step, *args, **kwargs)

    def _read_records(self) -> dict[str, bytes]:
        if self.records is None or self.info.rank != 0:
            return {}
        local = self.records[0]
        return {name: (local / name).read_bytes() for name in RECORDS if (local / name).is_file()}

    def after_commit(self, final: Path) -> None:
        """A synchronous save: DCP wrote `final` into the scratch (every rank its shards); upload and commit it
        on the store now (collective). A background save was published by its upload thread already."""
        if not self.background:
            self.publish(final, self._records_at_save)

    def _save_in_background(self, state: dict[str, Any], tmp: Path, final: Path, record: dict[str, Any]) -> None:
        """DCP's background write (and rank 0's local commit), then, in this rank's upload thread, the upload
        and the commit on the store: the next save, a load or the end of the run waits for all of it."""
        if self._upload_group is None:  # collective, like every save: all ranks create it together
            self._upload_group = dist.new_group(backend="gloo")
            self._uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-upload")
        super()._save_in_background(state, tmp, final, record)
        written, group, records = self._pending, self._upload_group, self._records_at_save
        assert written is not None and self._uploader is not None

        def upload() -> None:
            failed = None
            try:
                written.result()  # rank 0: every rank's shards written and the folder renamed; others: their shards
            except Exception as err:  # still meet the others' collectives: every rank then raises
                failed = f"the checkpoint write failed on rank {self.info.rank}: {type(err).__name__}: {err}"
            _barrier(group)  # rank 0's local commit is done before any rank lists the folder it renamed
            self.publish(final, records, group, failed)

        self._pending = self._uploader.submit(upload)

    def publish(
        self, final: Path, records: dict[str, bytes], group: dist.ProcessGroup | None = None, failed: str | None = None
    ) -> None:
        """Upload this rank's files of `final` (rank 0 also the metadata and the run's `records`), then rank 0
        commits: `checksums.json` once every rank reported its upload complete, then prunes the older
        checkpoints. Collective over `group`. A rank whose write (`failed`) or upload failed still joins the
        collectives: every rank raises UploadFailed, and nothing is committed; so does every rank when rank 0's
        commit (or its pruning) fails."""
        rank = self.info.rank
        error = failed
        mine: dict[str, Path] = {}
        if error is None and rank == 0:
            try:
                for name in [n for n, done in self.store.steps().items() if not done or n == final.name]:
                    self.store.remove(name)  # a save killed mid-upload, or this step saved again after a resume
            except Exception as err:
                error = f"rank 0 could not clear {self.store.url}: {type(err).__name__}: {err}"
        _barrier(group)  # no rank uploads into a folder rank 0 is still removing
        digests: dict[str, str] = {}
        if error is None:
            try:
                mine = self._files(final)
                upload_files(mine, join(self.store.url, final.name))
                if records:
                    fs, key = filesystem(self.records[1])  # type: ignore[index]
                    fs.pipe({f"{key.rstrip('/')}/{name}": data for name, data in records.items()})
                digests = {name: sha256_file(path) for name, path in mine.items()}
            except Exception as err:
                error = f"rank {rank} could not upload {final.name}: {type(err).__name__}: {err}"
        everyone = _gather((digests, error), group)  # also the barrier: every rank's upload is complete
        failures = [e for _, e in everyone if e is not None]
        if failures:
            raise UploadFailed(f"checkpoint {final.name} not committed on {self.store.url}: {failures[0]}")
        error = None
        if rank == 0:
            files = {name: digest for part, _ in everyone for name, digest in part.items()}
            text = json.dumps({"algorithm": "sha256", "files": files}, indent=1, sort_keys=True) + "\n"
            try:
                self.store.fs.pipe_file(f"{self.store.key}/{final.name}/{CHECKSUMS}", text.encode())  # the commit
            except Exception as err:
                error = f"checkpoint {final.name} not committed on {self.store.url}: rank 0 could not write its "
                error += f"manifest: {type(err).__name__}: {err}"
            if error is None:
                try:
                    for old in self.store.committed()[: -self.keep]:
                        self.store.remove(old)
                except Exception as err:
                    error = f"checkpoint {final.name} committed on {self.store.url}, but rank 0 could not remove "
                    error += f"the older ones: {type(err).__name__}: {err}"
        # rank 0's outcome to every rank (also the barrier): one that raised alone left the others waiting here
        outcome = _gather(error, group)[0]
        if outcome is not None:
            raise UploadFailed(outcome)

    def _files(self, final: Path) -> dict[str, Path]:
        """What this rank uploads of `final`: the .distcp files it wrote, and on rank 0 every other file but the
        manifest (written on the store last, from the gathered digests)."""
        rank = self.info.rank
        written = final if final.is_dir() else final.with_name(final.name + ".tmp")  # other nodes: never renamed
        mine = {p.name: p for p in written.iterdir() if p.name.startswith(f"__{rank}_") and p.suffix == ".distcp"}
        if rank == 0:
            mine.update({p.name: p for p in written.iterdir() if p.is_file() and not p.name.endswith(".distcp")})
            mine.pop(CHECKSUMS, None)
        return mine

    def latest(self) -> Path | None:
        """The newest checkpoint committed on the store (its local path; fetched by `load`)."""
        committed = rank0_verdict(self.store.committed, OSError)
        names = _gather(committed)[0]
        return self.root / names[-1] if names else None

    def fetch(self, path: Path) -> None:
        """The committed checkpoint into each node's scratch, unless this node holds it already. Collective."""

        def fetch() -> None:
            local = json.loads((path / CHECKSUMS).read_text()) if (path / CHECKSUMS).is_file() else None
            remote = json.loads(self.store.fs.cat_file(f"{self.store.key}/{path.name}/{CHECKSUMS}"))
            if local != remote:
                shutil.rmtree(path, ignore_errors=True)
                download_folder(join(self.store.url, path.name), path)

        on_each_node(self.info, fetch)

    def load(self, path: Path, model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Fetch the committed checkpoint (see `fetch`), then load it as a local one."""
        self.fetch(path)
        return super().load(path, model, *args, **kwargs)


def _describe_store_run(url: str, present: list[str]) -> str:
    steps = StoreCheckpoints(join(url, "checkpoints")).committed()
    last = f"last checkpoint {steps[-1]}" if steps else "no checkpoint"
    return f"a training run ({', '.join(present)}; {last})"


def check_store_output(url: str, resume: bool, overwrite: bool, can_overwrite: bool = True) -> None:
    """The store's side of `trainer.rerun.check_output`: a previous run there needs --resume or --overwrite
    (`can_overwrite`: the CLI has that flag)."""
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
        replace_it = " or --overwrite to replace it" if can_overwrite else ""
        raise OutputInUse(
            f"{url} holds {_describe_store_run(url, present)}; pass --resume to continue it{replace_it}, "
            "or choose another --out"
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
        """`origins`: each staged flag's local copy and the URL it copies (--out's included)."""
        self.url, self.local, self.info, self.origins = url, local, info, origins

    def url_of(self, path: str | Path) -> str:
        """The URL a path inside a staged copy stands for (other paths unchanged)."""
        path = Path(path).resolve()
        for copy, url in self.origins.values():
            copy = copy.resolve()
            if path == copy:
                return url
            if copy.is_dir() and path.is_relative_to(copy):
                return join(url, path.relative_to(copy).as_posix())
        return str(path)

    def name_origins(self, meta: dict[str, Any], flags_key: str = "train_config") -> dict[str, Any]:
        """The run's record (run_config.json, trainer_state.json) naming the URLs, not the scratch copies that
        go with the run: a checkpoint exported on its own later finds its tokenizer on the store."""
        flags = dict(meta.get(flags_key, {}))
        for name, (_, url) in self.origins.items():
            flags[name] = url
        tokenizer = dict(meta.get("tokenizer", {}))
        if tokenizer.get("path"):
            tokenizer["path"] = self.url_of(tokenizer["path"])
        return {**meta, flags_key: flags, "tokenizer": tokenizer}

    def checkpointer(self, keep: int, background: bool = False) -> StoreCheckpointer:
        """Checkpoints committed under `<url>/checkpoints`, each with the run's records as they were at its save."""
        url = join(self.url, "checkpoints")
        records = (self.local, self.url)
        return StoreCheckpointer(self.local / "checkpoints", keep, url, self.info, background, records)

    def _on_rank0(self, what: str, upload: Callable[[], None]) -> None:
        """`upload()` on rank 0; its failure (any: botocore's connection errors are not OSErrors) raised on every
        rank as one UploadFailed line. Collective: a rank that raised alone would leave the others waiting in
        the next collective, which it never reaches (a store gone at the end of a run hung it)."""

        def attempt() -> None:
            try:
                upload()
            except Exception as err:
                raise UploadFailed(f"{what} not uploaded to {self.url}: {type(err).__name__}: {one_line(err)}") from err

        rank0_verdict(attempt, UploadFailed)

    def publish_records(self) -> None:
        """metrics.jsonl and run_config.json as they are now (rank 0; at the end: each checkpoint takes the
        records of its save with it). Collective."""
        files = {n: self.local / n for n in RECORDS if (self.local / n).is_file()}
        self._on_rank0("the run's records", lambda: upload_files(files, self.url))

    def publish_export(self, hf_dir: Path | None, adapter: Path | None = None) -> None:
        """hf/ (its config.json last) and a LoRA run's adapter/ (adapter_config.json last). Collective."""

        def upload() -> None:
            if hf_dir is not None:
                upload_folder(hf_dir, join(self.url, "hf"), last=HF_MARKER)
            if adapter is not None:
                upload_folder(adapter, join(self.url, "adapter"), last="adapter_config.json")

        self._on_rank0("the export", upload)


def fetch_input(url: str, local: Path) -> tuple[Path, str]:
    """A file or folder input, copied under `local` as it is on the store."""
    return download_input(url, local), url


def fetch_model(url: str, local: Path) -> tuple[Path, str]:
    """A model on the store into `local`: an HF export, a checkpoint folder, or a trainer --out (its hf/, else
    its newest committed checkpoint: only that folder is fetched, not every checkpoint of the run)."""
    fs, key = filesystem(url)
    key = key.rstrip("/")
    chosen = url
    if fs.exists(f"{key}/hf/{HF_MARKER}"):
        chosen = join(url, "hf")
    elif not fs.exists(f"{key}/{HF_MARKER}"):
        committed = StoreCheckpoints(join(url, "checkpoints")).committed()
        chosen = join(url, "checkpoints", committed[-1]) if committed else url
    download_folder(chosen, local)
    return local, chosen


def _check_apart(urls: dict[str, str]) -> None:
    """A store --out apart from the store inputs (the flags' own checks see only the local copies): --out
    inside --shards trained into the mixture's folder and exited 0. The same on every rank, no collective."""
    out = urls.get("out", "").rstrip("/")
    for name, url in urls.items():
        place = url.rstrip("/")
        if out and name != "out" and (out == place or out.startswith(place + "/") or place.startswith(out + "/")):
            raise ValueError(f"--out {urls['out']}: an output folder must be apart from --{name.replace('_', '-')} "
                             f"({url})")  # fmt: skip


def scratch_folder(cfg: Config) -> Path:
    """This node's staging folder for the run: the same path on every rank of the node, one per --out."""
    base = Path(cfg.scratch) if cfg.scratch is not None else Path(tempfile.gettempdir())
    tag = hashlib.sha256(str(cfg.out).encode()).hexdigest()[:12]
    return base / f"cc2model-train-{tag}"


@contextlib.contextmanager
def staged(
    cfg: Config,
    info: DistInfo,
    inputs: tuple[str, ...] = PRETRAINING_INPUTS,
    fetchers: dict[str, Fetch] | None = None,
    run_kind: str = "training run",
) -> Iterator[tuple[Config, StoreRun | None]]:
    """`cfg` with its URLs (the `inputs` flags and --out) replaced by local copies in the node's scratch, and
    the run's store (None when --out is local). Inputs are fetched (by `fetchers[name]`, default: the file or
    folder as it is), the store's --out checked and locked before any training; the scratch is removed at
    the end. A config without `overwrite` (SFT) is refused a previous run on the store unless --resume;
    `run_kind` names the run in the lock (what a second run there is told)."""
    urls = {name: str(getattr(cfg, name)) for name in (*inputs, "out")}
    urls = {name: url for name, url in urls.items() if is_remote(url)}
    fetchers = fetchers or {}
    can_overwrite = hasattr(cfg, "overwrite")
    overwrite = bool(getattr(cfg, "overwrite", False))
    if not urls:
        yield cfg, None
        return
    for name, url in urls.items():
        what = "--" + name.replace("_", "-")
        rank0_verdict(lambda url=url, what=what: check_store(url, what), ValueError)
    _check_apart(urls)
    scratch = scratch_folder(cfg)
    lock = reading = None
    if "out" in urls:
        rank0_verdict(lambda: check_store_output(urls["out"], cfg.resume, overwrite, can_overwrite), OutputInUse)
        lock = rank0_verdict(lambda: acquire_output_lock(urls["out"], run_kind), ValueError)
    try:
        if "shards" in urls:  # a lease for the whole run: no writer replaces the mixture it reads and resumes from
            reading = rank0_verdict(lambda: acquire_read_lock(urls["shards"], "training run"), ValueError)
        fetched: dict[str, tuple[str, str]] = {}  # input -> its copy's path inside the scratch, the URL it copies
        fetchers = {**shard_fetchers(cfg), **fetchers}  # --shards / --val-shards: the manifest only (read by ranges)

        def fetch() -> None:
            shutil.rmtree(scratch, ignore_errors=True)  # the store is the truth: a previous staging is stale
            scratch.mkdir(parents=True)
            for name, url in urls.items():
                if name != "out":
                    copy, source = fetchers.get(name, fetch_input)(url, scratch / name)
                    fetched[name] = (str(copy.relative_to(scratch)), source)
            if "out" in urls and cfg.resume:  # the records the resumed run appends to
                fetch_records(urls["out"], scratch / "out")

        on_each_node(info, fetch)
        # rank 0's names, inside this node's own scratch (each node may have its own --scratch)
        copies = _gather(fetched)[0]
        local = {name: scratch / rel for name, (rel, _) in copies.items()}
        store = None
        if "out" in urls:
            if overwrite:
                rank0_verdict(lambda: clear_store_outputs(urls["out"]), OSError)
            local["out"] = scratch / "out"
            sources = {name: source for name, (_, source) in copies.items()} | {"out": urls["out"]}
            origins = {name: (local[name], sources[name]) for name in urls}
            store = StoreRun(urls["out"], local["out"], info, origins)
        yield replace(cfg, **local, **({"overwrite": False} if can_overwrite else {})), store
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
