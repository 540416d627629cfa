"""One writer per run directory on an object store: a lock object with its owner, host and heartbeat.

An object store has no ``flock`` and nobody drops a dead holder's lock, so the lock is an object,
``<folder>/.lock``, created only if absent (a conditional PUT, ``If-None-Match: *``: of two runs starting
together exactly one creates it) and rewritten by its holder every ``HEARTBEAT_S`` seconds. A second run
reads it and is refused in one line naming the holder (host, pid, command) and its last heartbeat; a lock
whose heartbeat is older than ``STALE_AFTER_S`` belonged to a run that died: the refusal says so, with its
age, and how to break it (``python -m common.object_lock --break URL``). A holder on this host whose pid
no longer runs is known dead, and its lock is taken over at once (a run killed here and started again
resumes without waiting for the lock to go stale). A store without conditional
create cannot be locked: the refusal says so in one line. Local folders keep ``common.lock.FolderLock``;
``acquire_output_lock`` picks the backend from the path.

A process that reads a folder for a long time (a training run its ``--shards``) holds a read lease there:
one object per reader, ``<folder>/.readers/<token>.json``, with the same owner, host, pid and heartbeat,
deleted at release (``ObjectReadLease``; ``common.lock.FolderReadLock`` is its local twin). A writer's lock
on the folder is refused while a fresh lease is there, naming the reader (an overwrite deleted the shards
under a training run); a stale lease is reported with its age and broken like a stale lock (``--break``
deletes the lock and the leases); a lease whose holder died on this host is dropped at once. A reader is
refused while a writer holds the folder's lock. Each side writes its own object first and then looks for
the other's, so of a writer and a reader starting together at least one sees the other.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from typing import Any

from common.cli import ArgumentParser, one_line
from common.lock import LOCK_NAME, FolderLock, FolderLocked, FolderReadLock, FolderUnavailable
from common.storage import StorageError, check_store, filesystem, is_remote, join, local_path

HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0  # ten missed heartbeats: the holder is dead, or cut off from the store
READERS = ".readers"  # the folder's read leases, one object per reader


def _read_record(fs: Any, key: str) -> dict[str, Any]:
    """The holder record at `key`: {} when absent, {"unreadable": True} when not a JSON object. On ``s3://`` one
    GET (s3fs asked its size first: a HEAD before each heartbeat and the release's delete)."""
    try:
        record = json.loads(fs.cat_file(key, **getattr(fs, "small_read_options", {})))
    except FileNotFoundError:
        return {}
    except ValueError:
        return {"unreadable": True}
    return record if isinstance(record, dict) else {"unreadable": True}


def _died_here(record: dict[str, Any]) -> bool:
    """The record names a process of this host that no longer runs (known dead, no need to wait)."""
    if record.get("host") != socket.gethostname() or not isinstance(record.get("pid"), int):
        return False
    try:
        os.kill(record["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, not ours to signal
    except OverflowError:  # a pid no process can have (a planted record): judged by its heartbeat, as another host's
        return False
    return False


def _holder_and_age(record: dict[str, Any]) -> tuple[str, float | None]:
    """("host pid N: command", seconds since its heartbeat), or ("holder unknown", None) for an unreadable one."""
    if not record or record.get("unreadable"):
        return "holder unknown", None
    try:
        age: float | None = time.time() - float(record.get("heartbeat_at", 0))
    except (TypeError, ValueError):
        age = None
    return f"{record.get('host')} pid {record.get('pid')}: {record.get('command')}", age


def _fresh(record: dict[str, Any]) -> bool:
    """The record's holder beat within `STALE_AFTER_S` (alive, or died too recently to tell)."""
    age = _holder_and_age(record)[1]
    return age is not None and age < STALE_AFTER_S


def _refusal(folder: str, record: dict[str, Any], doing: str, holder: str, stale_kind: str) -> str:
    """One line naming the holder of `record` and its heartbeat's age: `folder` "is being {doing} by
    {holder}" while the heartbeat is fresh, else "holds a stale {stale_kind}" with how to break it."""
    who, age = _holder_and_age(record)
    if age is not None and age < STALE_AFTER_S:
        return (
            f"{folder} is being {doing} by {holder} ({who}; heartbeat {age:.0f} s ago); "
            "wait for it to finish or stop it, then run again"
        )
    since = f"last heartbeat {age:.0f} s ago" if age is not None else "no heartbeat"
    return (
        f"{folder} holds a stale {stale_kind} ({who}; {since}); if that run is dead, break it with "
        f"`python -m common.object_lock --break {folder}` and run again"
    )


class _HeartbeatObject:
    """An object naming its holder (host, pid, command), rewritten every `heartbeat_s` while held and
    deleted at `release`; a holder that dies leaves it to go stale."""

    def __init__(self, folder: str, what: str, heartbeat_s: float) -> None:
        self.folder = folder.rstrip("/")
        self.what = what
        self.heartbeat_s = heartbeat_s
        self.token = uuid.uuid4().hex
        self.url = join(self.folder, *self._name().split("/"))
        self.fs, self.key = filesystem(self.url)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._started = time.time()

    def _body(self) -> bytes:
        holder = {
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": shlex.join(sys.argv),
            "what": self.what,
            "started_at": self._started,
            "heartbeat_at": time.time(),
        }
        return (json.dumps(holder) + "\n").encode()

    def _name(self) -> str:
        """The object's name under the folder."""
        raise NotImplementedError

    def _holder(self) -> dict[str, Any]:
        return _read_record(self.fs, self.key)

    def _start_heartbeat(self) -> None:
        self._beat = threading.Thread(target=self._heartbeat, name="object-lock", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                if self._holder().get("token") == self.token:
                    self.fs.pipe_file(self.key, self._body())
            except Exception as err:  # the store is unreachable for a while: the next beat tries again
                print(f"warning: lock heartbeat on {self.url} failed ({err})", file=sys.stderr)

    def _drop_own(self) -> None:
        """Delete the object if it is still this holder's (a broken one may have been taken by another)."""
        if self._holder().get("token") == self.token:
            self.fs.rm_file(self.key)

    def release(self) -> None:
        """Stop the heartbeat and delete the object. A store out of reach now (the run may be ending because of
        it) leaves the object to go stale, said in one warning line: never raised over the run's own outcome
        (a one-line error, or its completed outputs)."""
        if self._beat is None:
            return
        self._stop.set()
        self._beat.join()
        self._beat = None
        try:
            self._drop_own()
        except Exception as err:  # botocore's connection errors are not OSErrors
            print(
                f"warning: could not remove {self.url} ({one_line(err)}); a rerun on this host takes it over, "
                f"elsewhere it is stale after {STALE_AFTER_S:.0f} s (then `python -m common.object_lock --break "
                f"{self.folder}`)",
                file=sys.stderr,
            )


class ObjectLock(_HeartbeatObject):
    """An exclusive lock on a run directory URL; `release` deletes it, a holder that dies leaves it to go stale.
    Refused while another writer holds it or a reader holds a fresh lease on the folder."""

    def __init__(self, folder: str, what: str = "run", heartbeat_s: float = HEARTBEAT_S) -> None:
        super().__init__(folder, what, heartbeat_s)

    def _name(self) -> str:
        return LOCK_NAME

    def acquire(self, checked: bool = False) -> ObjectLock:
        """Take the lock (refusals as ``FolderLocked``); ``checked``: the caller asked ``check_store`` of this
        folder's store just before (not asked again: a fresh client and a listing, ~0.1-0.2 s of CPU)."""
        if not checked:
            check_store(self.folder)
        self._started = time.time()
        try:
            self._create()
        except FileExistsError:
            if not self._holder_died_here():
                raise FolderLocked(self._refusal()) from None
            try:  # two runs taking over at once: the conditional create lets one of them win
                self._create()
            except FileExistsError:
                raise FolderLocked(self._refusal()) from None
        except PermissionError as err:
            raise FolderUnavailable(f"{self.folder}: cannot write there ({' '.join(str(err).split())})") from None
        except (NotImplementedError, TypeError):
            raise FolderUnavailable(
                f"{self.folder}: this store cannot be locked (no conditional create); "
                "write the run to a local folder or an s3:// bucket"
            ) from None
        try:
            _refuse_readers(self.fs, self.folder)  # after the lock is there: a reader starting now sees it
        except BaseException:
            self._drop_own()
            raise
        self._start_heartbeat()
        return self

    def _create(self) -> None:
        self.fs.pipe_file(self.key, self._body(), mode="create")

    def _holder_died_here(self) -> bool:
        """The lock belongs to a process of this host that no longer runs: delete it, say True."""
        holder = self._holder()
        if not _died_here(holder):
            return False
        if self._holder().get("token") == holder.get("token"):
            self.fs.rm_file(self.key)
        return True

    def _refusal(self) -> str:
        return _refusal(self.folder, self._holder(), "written", f"another {self.what}", "lock")

    def __enter__(self) -> ObjectLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _leases(fs: Any, folder: str) -> list[str]:
    """The keys of `folder`'s read leases (listed afresh: a cached listing would hide a new one)."""
    prefix = filesystem(join(folder, READERS))[1].rstrip("/")
    fs.invalidate_cache(prefix)
    try:
        return sorted(name for name in fs.ls(prefix, detail=False) if name.rstrip("/") != prefix)
    except FileNotFoundError:
        return []


def _refuse_readers(fs: Any, folder: str) -> None:
    """FolderLocked (one line naming the reader) while a lease on `folder` is fresh, or stale and unbroken;
    a lease whose holder died on this host is deleted."""
    stale = None
    for key in _leases(fs, folder):
        record = _read_record(fs, key)
        if _died_here(record):
            fs.rm_file(key)
        elif _fresh(record):
            raise FolderLocked(_refusal(folder, record, "read", f"a {record.get('what') or 'reader'}", "read lease"))
        else:
            stale = stale or record
    if stale is not None:
        raise FolderLocked(_refusal(folder, stale, "read", "a reader", "read lease"))


class ObjectReadLease(_HeartbeatObject):
    """A shared read lease on a folder URL (the store's `common.lock.FolderReadLock`): writers' locks on the
    folder are refused while it is fresh; refused itself while a writer holds the folder's lock. `acquire`
    returns False when the store does not let this process write the lease (a read-only bucket): the read
    goes on unleased, as a local read of a folder this process may not write."""

    def __init__(self, folder: str, what: str = "reader", heartbeat_s: float = HEARTBEAT_S) -> None:
        super().__init__(folder, what, heartbeat_s)

    def _name(self) -> str:
        return f"{READERS}/{self.token}.json"

    def acquire(self) -> bool:
        self._started = time.time()
        try:
            self.fs.pipe_file(self.key, self._body())
        except PermissionError:
            return False
        writer = _read_record(self.fs, filesystem(join(self.folder, LOCK_NAME))[1])
        if writer and not _died_here(writer):  # after the lease is there: a writer starting now sees it
            self._drop_own()
            raise FolderLocked(_refusal(self.folder, writer, "written", f"a {writer.get('what') or 'writer'}", "lock"))
        self._start_heartbeat()
        return True


def acquire_output_lock(
    folder: str | os.PathLike[str], what: str = "run", checked: bool = False
) -> FolderLock | ObjectLock:
    """The run lock of `folder`, held until `release` or exit: an flock locally, a lock object on a store
    (``checked``: the caller has just asked ``check_store`` of that store)."""
    if is_remote(folder):
        return ObjectLock(str(folder), what).acquire(checked)
    return FolderLock(local_path(folder), what).acquire()


def acquire_read_lock(folder: str | os.PathLike[str], what: str = "reader") -> FolderReadLock | ObjectReadLease | None:
    """A read lock on `folder` held until `release` (an flock locally, a lease on a store); None when the
    folder cannot be locked for reading (absent locally, or not writable by this process): read unlocked."""
    lock: FolderReadLock | ObjectReadLease
    lock = ObjectReadLease(str(folder), what) if is_remote(folder) else FolderReadLock(local_path(folder), what)
    return lock if lock.acquire() else None


def break_lock(folder: str) -> list[str]:
    """Delete `folder`'s lock object and its readers' leases (their holders are known dead); what went."""
    fs, key = filesystem(join(folder, LOCK_NAME))
    removed = [name for name in (key, *_leases(fs, folder)) if fs.exists(name)]  # S3 deletes a missing key quietly
    for name in removed:
        fs.rm_file(name)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m common.object_lock", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--break", dest="folder", required=True, metavar="URL", help="folder to unlock (its lock and read leases)"
    )
    args = parser.parse_args(argv)
    if not is_remote(args.folder):  # a local path: `.lock` there is an flock's file, deleting it frees no one
        print(f"error: --break {args.folder!r}: not a store URL (s3://...); a local folder's lock is released "
              "when its holder exits, there is nothing to break", file=sys.stderr)  # fmt: skip
        return 2
    try:
        check_store(args.folder, "--break")
    except StorageError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    removed = break_lock(args.folder)
    print(f"broke {len(removed)} lock object(s) of {args.folder}" if removed else f"no lock at {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
