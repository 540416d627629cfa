"""Uploads that overlap a task's compute: an output file finished in the node's scratch goes to its final key on
the store from a background thread while the task goes on, and the task waits for them before it is complete.

Measured on ``bench.object_store``: a task's outputs went up one after another, each closing file waiting for its
upload (and, written as ``<name>.tmp``, for the "rename" an object store does not have: a copy, a delete and four
look-ups). Staged locally and sent together, they cost the task the longest upload instead of their sum.

What a reader sees does not change: an object appears only when its upload completes (one PUT, or a completed
multipart upload), so a killed task leaves no partial object; ``uploads_before_completion``, the last step of a
stage's pipeline, waits for every upload of the task (raising the first failure) before datatrove writes the
task's stats and completion marker, so a rerun skips exactly the tasks whose outputs all landed. Outside that
step (a writer used on its own) ``upload_later`` uploads at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

UPLOAD_THREADS = 4


class _TaskUploads(threading.local):
    """Per thread (a task's pipeline runs in one): whether its barrier is open, the uploads it has not waited for."""

    deferring = False

    def __init__(self) -> None:
        self.pending: list[Future] = []


_POOL: list[ThreadPoolExecutor] = []  # the process's upload threads, made on first use
_STATE = _TaskUploads()


def _forget_after_fork() -> None:
    """A forked task process has none of its parent's threads: its own pool, no pending uploads."""
    global _STATE
    _POOL.clear()
    _STATE = _TaskUploads()


os.register_at_fork(after_in_child=_forget_after_fork)


def _upload(fs: Any, local: str, key: str) -> None:
    try:
        fs.put_file(local, key)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)


def upload_later(fs: Any, local: str, key: str) -> None:
    """Upload the complete local file ``local`` to ``key`` on ``fs`` and delete it: in the background while a
    task's ``uploads_before_completion`` step runs, else now."""
    if not _STATE.deferring:
        _upload(fs, local, key)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="upload"))
    _STATE.pending.append(_POOL[0].submit(_upload, fs, local, key))


def wait_for_uploads() -> None:
    """Block until every upload this thread started landed; the first failure is raised."""
    pending, _STATE.pending = _STATE.pending, []
    errors = [err for err in (future.exception() for future in pending) if err is not None]
    if errors:
        raise errors[0]


@contextlib.contextmanager
def background_uploads() -> Iterator[None]:
    """Inside the block, ``upload_later`` uploads in the background; its end waits for them all (the first
    failure raised), so what is written after it (a completion marker, a page naming the files) comes after."""
    _STATE.deferring = True
    try:
        yield
    finally:
        _STATE.deferring = False
    wait_for_uploads()


def uploads_before_completion(data: Iterator | None, rank: int = 0, world_size: int = 1) -> Iterator:
    """A pipeline's last step: its writers' uploads run in the background while the task goes on, and the task
    ends (datatrove then writes its stats and completion marker) only once they all landed."""
    with background_uploads():
        if data is not None:
            yield from data
