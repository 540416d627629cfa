"""One writer per output folder: an fcntl lock on `<folder>/.lock`, held for as long as a run writes there.

Two runs writing the same folder interleave their files (shards, checkpoints, metrics) without
either noticing, so the second one must be refused before it writes anything. `flock` is released
by the kernel when the holder dies (even by SIGKILL), so a killed run never leaves a stale lock to
clean up by hand; the file itself stays and records the last holder's pid and command, which the
refusal names. flock works on local disks and on NFSv4 / Lustre mounts with locking enabled; on a
file system without locks, `acquire` raises instead of pretending.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".lock"


class FolderUnavailable(ValueError):
    """A run cannot write this folder (a file in its path, no write permission); one line saying why.

    A ValueError, like every bad-input error the CLIs turn into their one line (`common.cli`)."""


class FolderLocked(FolderUnavailable):
    """Another live process holds the folder's lock; the message is one line naming it."""


def check_writable(folder: str | os.PathLike[str]) -> Path:
    """Refuse, before anything is written, a folder that could not be created or written: its nearest
    existing ancestor must be a directory this process may write to (mode, read-only mount, immutable)."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists():
        if existing.is_symlink():  # a dangling link: mkdir would fail on it
            raise FolderUnavailable(f"{folder}: {existing} is a broken symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        raise FolderUnavailable(f"{folder}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FolderUnavailable(f"{folder}: {existing} is not writable")
    return folder


def refuse_planted_links(folder: str | os.PathLike[str]) -> None:
    """Refuse an output folder that holds a symbolic link anywhere below it: a run writes through its
    own names (``.lock``, ``report/``, ``curated/``, checkpoints), and a link planted under one of them
    would send the write to the link's target, outside the folder (the audit overwrote a file elsewhere
    with the lock record, and put the report outside ``--out``). The folder itself may be a link."""
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            path = Path(parent) / name
            if path.is_symlink():
                raise FolderUnavailable(
                    f"{folder}: {path} is a symbolic link; an output folder is never written through links, "
                    "remove it (or choose another folder)"
                )


def check_apart(out: str | os.PathLike[str], inputs: dict[str, str | os.PathLike[str]]) -> None:
    """Refuse an output folder that is an input folder, lies inside one or holds one: the run would
    overwrite what it reads, or read its own output on a rerun. `inputs`: {what: folder}."""
    out_path = Path(os.path.realpath(out))  # realpath: a symlink loop is left as is, not a RuntimeError
    for what, folder in inputs.items():
        folder_path = Path(os.path.realpath(folder))
        if out_path == folder_path or folder_path in out_path.parents or out_path in folder_path.parents:
            raise FolderUnavailable(f"{out}: an output folder must be apart from the {what} ({folder})")


def refuse_inside_live_folder(out: str | os.PathLike[str], what: str) -> None:
    """Refuse an output folder that lies inside a folder a live process is writing (its `.lock` held
    exclusively): an export into a subfolder of a training run's --out while it trains would be mixed
    with, or erased by, what the run writes there. Probed with a shared, non-blocking flock on each
    ancestor's `.lock` (never created, never followed if a link), released at once."""
    out_path = Path(out).absolute()
    _refuse_live(out_path.parents, what, f"{out}: an output folder inside a folder in use")


def refuse_being_written(paths: Iterable[str | os.PathLike[str]], what: str, ancestors: bool = True) -> None:
    """Refuse inputs that a live process is still writing: each path, or (`ancestors`) a folder holding it, has
    its `.lock` held exclusively by another process. tokenizer.train, dedup.run and mixtures.build read the
    documents of a run still curating (some of them, with exit 0); a trainer read a mixture being rebuilt.
    For the CLIs: the chain's own steps run under the run's lock in other processes (Ray), so its functions
    do not call this."""
    folders: dict[Path, None] = {}
    for path in paths:
        absolute = Path(path).absolute()
        folders.update(dict.fromkeys([absolute, *absolute.parents] if ancestors else [absolute]))
    _refuse_live(folders, what, "an input being written", _lineage())


def _lineage() -> set[int]:
    """This process and its ancestors: a CLI started by the run that holds the lock (evals.ablate's
    tokenizer.train on the samples in its own folder) reads what its parent wrote for it."""
    pids, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat_file:
                pid = int(stat_file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _refuse_live(folders: Iterable[Path], what: str, context: str, ours: set[int] | None = None) -> None:
    """FolderLocked naming the holder when one of `folders` has its `.lock` held exclusively by another process
    (`ours`: processes whose locks do not count; this one by default: flock would refuse this process's own
    second descriptor, so a run writing into its own folder is told apart by the pid its lock records)."""
    ours = ours or {os.getpid()}
    for folder in folders:
        try:
            fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # no lock there (or not one this process may read): nothing live to collide with
        if _holder_record(fd).get("pid") in ours:  # the training run exporting into its own --out (the PP export)
            os.close(fd)
            continue
        try:
            fd = _flock(fd, fcntl.LOCK_SH, folder, folder / LOCK_NAME, what)
        except FolderLocked as err:
            raise FolderLocked(f"{context}; {err}") from None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def check_local_output(out: str | os.PathLike[str], command: str) -> None:
    """Refuse a URL as the output of a command that writes a local folder: `s3://bucket/x` was taken as the
    relative path `s3:/bucket/x`, and the result landed in a folder named `s3:` under the current one."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", str(out)):  # `s3://b/x`, or `s3:/b/x` once made a Path
        raise FolderUnavailable(
            f"{out}: {command} writes a local folder, not a URL; write it locally and copy it to the store"
        )


def check_not_input(out: str | os.PathLike[str], files: dict[str, object], folders: dict[str, object]) -> None:
    """Refuse an output file that is one of the files a run reads, or an existing file inside a folder it
    reads (a model's config.json): the audit overwrote a task file with its report, a model's config with
    generations and a classifier's training parquet with the model. A new file beside them is fine.
    `files` / `folders`: {what: path}; None values are skipped."""
    target = Path(os.path.realpath(out))
    for what, file in files.items():
        if file is not None and target == Path(os.path.realpath(str(file))):
            raise FolderUnavailable(f"{out} is the {what} this run reads; write the output elsewhere")
    for what, folder in folders.items():
        inside = folder is not None and Path(os.path.realpath(str(folder))) in target.parents
        if inside and os.path.lexists(target):
            raise FolderUnavailable(f"{out} is a file of the {what} ({folder}); write the output elsewhere")


class _HeldFlock:
    """What both lock kinds hold: the locked file's descriptor, until `release` (or process exit)."""

    _fd: int | None = None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class FolderLock(_HeldFlock):
    """An exclusive, non-blocking lock on a folder (created if missing); `release` or process exit frees it.

    `writes_below`: the holder writes inside the folder, so a link planted below it is refused (False for
    a folder locked only so that no one writes it while it is read, such as refilter's run). `lock_name`:
    another lock file than `.lock`, to lock one output file of a folder others write too (`file_lock`)."""

    def __init__(
        self, folder: str | os.PathLike[str], what: str = "run", writes_below: bool = True, lock_name: str = LOCK_NAME
    ) -> None:
        self.folder = Path(folder)
        self.writes_below = writes_below
        self.path = self.folder / lock_name
        self.what = what
        self._fd = None

    def acquire(self) -> FolderLock:
        check_writable(self.folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.writes_below:
                refuse_planted_links(self.folder)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # a planted .lock link: ELOOP
        except OSError as err:
            raise FolderUnavailable(f"{self.folder}: cannot write there ({err.strerror})") from None
        self._fd = _flock(fd, fcntl.LOCK_EX, self.folder, self.path, self.what)
        _record_holder(fd, self.what, reading=False)
        return self

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def file_lock(file: str | os.PathLike[str], what: str) -> FolderLock:
    """The lock of one output file (`.<name>.lock` beside it), not yet acquired: two runs writing one
    report file are refused, while other runs write other files of its folder."""
    file = Path(file)
    return FolderLock(file.parent, what, writes_below=False, lock_name=f".{file.name}.lock")


@contextmanager
def locked_folder(folder: str | os.PathLike[str], what: str = "run") -> Iterator[Path]:
    """`with locked_folder(out, "mixture build"):` hold `out`'s lock for the block; yields the folder."""
    with FolderLock(folder, what) as lock:
        yield lock.folder


class FolderReadLock(_HeldFlock):
    """A shared lock on `<folder>/.lock`, held while a process reads the folder (a training run its mixture).

    A writer's exclusive `FolderLock` on the folder is refused for as long as one reader holds it (the
    audit's `mixtures.build --overwrite` deleted the shards under a training run, which died), naming the
    reader; a reader is refused while a writer holds it (the folder is being rewritten). Readers do not
    exclude each other. A folder this process may not write gets its lock only when `.lock` is already
    there (a build made it); otherwise the read goes on unlocked, and `acquire` returns False."""

    def __init__(self, folder: str | os.PathLike[str], what: str = "reader") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.what = what
        self._fd = None

    def acquire(self) -> bool:
        writable = True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                return False  # no such folder: the reader's own checks say so, in their words
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise FolderUnavailable(f"{self.folder}: cannot lock {self.path} ({err.strerror})") from None
            try:  # a read-only folder: lock the lock file a build left there, if any
                fd, writable = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW), False
            except FileNotFoundError:
                return False
            except OSError as err:
                raise FolderUnavailable(f"{self.folder}: cannot lock {self.path} ({err.strerror})") from None
        self._fd = _flock(fd, fcntl.LOCK_SH, self.folder, self.path, self.what)
        if writable:
            _record_holder(fd, self.what, reading=True)
        return True


def _flock(fd: int, mode: int, folder: Path, path: Path, mine: str) -> int:
    """`fd` locked in `mode` without waiting; closed and FolderLocked (one line naming the holder) if taken.
    `mine`: what this process is (a holder of the same kind is "another" one)."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        named, what, reading = _read_holder(fd)
        os.close(fd)
        what = what or mine
        kind = f"another {what}" if what == mine else f"a {what}"
        doing = f"being {'read' if reading else 'written'} by {kind} ({named})"
        raise FolderLocked(f"{folder} is {doing}; wait for it to finish or stop it, then run again") from None
    except OSError as err:
        os.close(fd)
        raise FolderLocked(f"{folder}: cannot lock {path} ({err.strerror})") from None
    return fd


def _record_holder(fd: int, what: str, reading: bool) -> None:
    """Write who holds the lock into the lock file, for the refusal of the next comer to name."""
    os.ftruncate(fd, 0)
    holder = {"pid": os.getpid(), "command": shlex.join(sys.argv), "what": what, "reading": reading}
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


def _holder_record(fd: int) -> dict:
    """The JSON object `_record_holder` wrote ({} when the file holds none or cannot be read)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _read_holder(fd: int) -> tuple[str, str, bool]:
    """("pid N: command", what the holder is ("" if unrecorded), whether it reads) from the lock file."""
    holder = _holder_record(fd)
    try:
        named = f"pid {holder['pid']}: {holder['command']}"
        return named, str(holder.get("what", "")), bool(holder.get("reading"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "holder unknown", "", False
