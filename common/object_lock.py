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
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from typing import Any

from common.lock import LOCK_NAME, FolderLock, FolderLocked, FolderUnavailable
from common.storage import StorageError, check_store, filesystem, is_remote, join, local_path

HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0  # ten missed heartbeats: the holder is dead, or cut off from the store


class ObjectLock:
    """An exclusive lock on a run directory URL; `release` deletes it, a holder that dies leaves it to go stale."""

    def __init__(self, folder: str, what: str = "run", heartbeat_s: float = HEARTBEAT_S) -> None:
        self.folder = folder.rstrip("/")
        self.url = join(self.folder, LOCK_NAME)
        self.what = what
        self.heartbeat_s = heartbeat_s
        self.token = uuid.uuid4().hex
        self.fs, self.key = filesystem(self.url)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _body(self, started_at: float) -> bytes:
        holder = {
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": shlex.join(sys.argv),
            "started_at": started_at,
            "heartbeat_at": time.time(),
        }
        return (json.dumps(holder) + "\n").encode()

    def acquire(self) -> ObjectLock:
        check_store(self.folder)
        started = time.time()
        try:
            self._create(started)
        except FileExistsError:
            if not self._holder_died_here():
                raise FolderLocked(self._refusal()) from None
            try:  # two runs taking over at once: the conditional create lets one of them win
                self._create(started)
            except FileExistsError:
                raise FolderLocked(self._refusal()) from None
        except PermissionError as err:
            raise FolderUnavailable(f"{self.folder}: cannot write there ({' '.join(str(err).split())})") from None
        except (NotImplementedError, TypeError):
            raise FolderUnavailable(
                f"{self.folder}: this store cannot be locked (no conditional create); "
                "write the run to a local folder or an s3:// bucket"
            ) from None
        self._beat = threading.Thread(target=self._heartbeat, args=(started,), name="object-lock", daemon=True)
        self._beat.start()
        return self

    def _create(self, started: float) -> None:
        self.fs.pipe_file(self.key, self._body(started), mode="create")

    def _holder_died_here(self) -> bool:
        """The lock belongs to a process of this host that no longer runs: delete it, say True."""
        holder = self._holder()
        if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
            return False
        try:
            os.kill(holder["pid"], 0)
            return False  # alive (or not ours to signal): a live holder
        except ProcessLookupError:
            pass
        except PermissionError:
            return False
        if self._holder().get("token") == holder["token"]:
            self.fs.rm_file(self.key)
        return True

    def _heartbeat(self, started: float) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                if self._holder().get("token") == self.token:
                    self.fs.pipe_file(self.key, self._body(started))
            except Exception as err:  # the store is unreachable for a while: the next beat tries again
                print(f"warning: lock heartbeat on {self.url} failed ({err})", file=sys.stderr)

    def _holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.fs.cat_file(self.key))
        except FileNotFoundError:
            return {}
        except ValueError:
            return {"unreadable": True}

    def _refusal(self) -> str:
        holder = self._holder()
        if not holder or holder.get("unreadable"):
            who, age = "holder unknown", None
        else:
            who = f"{holder.get('host')} pid {holder.get('pid')}: {holder.get('command')}"
            age = time.time() - float(holder.get("heartbeat_at", 0))
        if age is not None and age < STALE_AFTER_S:
            return (
                f"{self.folder} is being written by another {self.what} ({who}; heartbeat {age:.0f} s ago); "
                "wait for it to finish or stop it, then run again"
            )
        since = f"last heartbeat {age:.0f} s ago" if age is not None else "no heartbeat"
        return (
            f"{self.folder} holds a stale lock ({who}; {since}); if that run is dead, break it with "
            f"`python -m common.object_lock --break {self.folder}` and run again"
        )

    def release(self) -> None:
        if self._beat is None:
            return
        self._stop.set()
        self._beat.join()
        self._beat = None
        if self._holder().get("token") == self.token:
            self.fs.rm_file(self.key)

    def __enter__(self) -> ObjectLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_output_lock(folder: str | os.PathLike[str], what: str = "run") -> FolderLock | ObjectLock:
    """The run lock of `folder`, held until `release` or exit: an flock locally, a lock object on a store."""
    if is_remote(folder):
        return ObjectLock(str(folder), what).acquire()
    return FolderLock(local_path(folder), what).acquire()


def break_lock(folder: str) -> bool:
    """Delete `folder`'s lock object (its holder is known dead); True when there was one."""
    fs, key = filesystem(join(folder, LOCK_NAME))
    try:
        fs.rm_file(key)
    except FileNotFoundError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.object_lock", description=__doc__.split("\n\n")[0])
    parser.add_argument("--break", dest="folder", required=True, metavar="URL", help="run directory to unlock")
    args = parser.parse_args(argv)
    try:
        check_store(args.folder, "--break")
    except StorageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(("broke the lock of " if break_lock(args.folder) else "no lock at ") + args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
