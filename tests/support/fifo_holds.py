"""A fixed point inside a task, for kill tests: a FIFO where the task opens a file for writing. The open blocks
until a reader comes, and none does, so the task waits exactly there (what it wrote before stays as it is) until
the test kills it, however loaded the machine; waiting for that state catches no window. ``hold_write`` lets the
open through and stalls the writes instead, once a pipe's worth is in: the task is held mid-file."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def hold_open(path: Path) -> None:
    """The next open of ``path`` for writing waits (its folders are made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def release_open(path: Path) -> None:
    """Later opens of ``path`` get a regular file: the FIFO replaced at once (a rename); an open already waiting
    on the FIFO keeps waiting (kill that task)."""
    regular = path.with_name(path.name + ".regular")
    regular.touch()
    os.replace(regular, path)


def hold_write(path: Path) -> int:
    """A FIFO at ``path`` with its read end open and never read (the returned descriptor: ``os.close`` it after):
    a writer's open goes through, and it waits in ``write`` once the pipe is full (cut to one page, whatever the
    system's default), its other files left as they were at that moment."""
    hold_open(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
    return reader


def waits_in_pipe_write(fifo: Path, proc: Path) -> bool:
    """Whether the process (its ``/proc`` folder) has ``fifo`` open and sleeps writing to a pipe: its kernel wait
    channel (``pipe_write``, ``anon_pipe_write``), or where a kernel does not name it, asleep in ``write``."""
    target = os.path.realpath(fifo)
    if not any(os.path.realpath(fd) == target for fd in (proc / "fd").iterdir()):
        return False
    wchan = (proc / "wchan").read_text()
    if wchan not in ("", "0"):
        return wchan.endswith("pipe_write")
    return _asleep_in(proc, ("1", "64"))  # write on x86-64, on arm64


def waits_in_fifo_open(proc: Path) -> bool:
    """Whether the process (its ``/proc`` folder) sleeps in the open of a FIFO: its kernel wait channel, or
    where a kernel does not name it (``wchan`` reads 0), asleep in the open/openat system call."""
    wchan = (proc / "wchan").read_text()
    if wchan not in ("", "0"):
        return wchan == "wait_for_partner"
    return _asleep_in(proc, ("2", "257", "56"))  # open and openat on x86-64, openat on arm64


def _asleep_in(proc: Path, syscalls: tuple[str, ...]) -> bool:
    """Whether the process sleeps (state S) inside one of ``syscalls`` (their numbers): the test where a kernel
    does not name its wait channel."""
    state = (proc / "stat").read_text()
    syscall = (proc / "syscall").read_text().split()
    return state[state.rindex(")") + 2] == "S" and bool(syscall) and syscall[0] in syscalls


def held_process(
    candidates: Callable[[], Iterable[int]],
    running: Callable[[], bool],
    timeout: float = 240,
    held: Callable[[Path], bool] = waits_in_fifo_open,
) -> int:
    """The first pid of ``candidates()`` (asked again until one is held) that is ``held`` (default: waiting in a
    FIFO's open); a RuntimeError as soon as ``running()`` is false (what should reach the hold ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in candidates():
            try:
                if held(Path(f"/proc/{pid}")):
                    return pid
            except OSError:
                continue
        if not running():
            raise RuntimeError("the run ended before a process was held at its FIFO")
        time.sleep(0.2)
    raise RuntimeError("no process was held at its FIFO")
