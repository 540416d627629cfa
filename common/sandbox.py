"""One call into datatrove's `ExtractorSandbox` (a child process killed after its time limit), with the two
ways a child fails turned into the drop reasons every step that uses one records.

The extraction step and the quality signals both run a document's work in such a child, so that one
hostile page costs its own time limit, not the task's; they name the failures alike (`timeout`,
`broken_process`) in their stats and `removed/<id>/` folders.

`CpuTimedSandbox` counts the limit in CPU seconds of the child (datatrove's counts wall-clock seconds,
so at load 11 a page that needs 0.4 s of CPU timed out and two identical runs kept different pages),
with a generous wall-clock backstop for a child that blocks. `SharedTextSandbox` is that sandbox for
large text payloads (HTML pages): the text reaches the child through a shared memory buffer instead of
being pickled through the pipe.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from datatrove.pipeline.extractors.base import ExtractorSandbox

T = TypeVar("T")
SHARED_BUFFER_BYTES = 64 << 20  # a 10 M character page in UTF-8 fits unless it is mostly outside the BMP
_CODEC = ("utf-8", "surrogatepass")  # every str round-trips, as through pickle
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
_POLL_SECONDS = 0.05  # how often a waiting parent looks at the child's CPU time (the answer wakes it at once)
WALL_BACKSTOP_FACTOR = 30  # a child may take this many times its CPU limit in wall-clock time ...
WALL_BACKSTOP_MIN_SECONDS = 30.0  # ... and at least this long, before it is treated as hung
_known_utf8: tuple[str, bytes] | None = None  # (a text, its UTF-8 bytes) from the reader that decoded it


def known_utf8(text: str, data: bytes) -> None:
    """Say that ``data`` is ``text`` encoded in UTF-8 (a reader that just decoded ``data`` strictly): the next
    hand-over of this very str object to a ``SharedTextSandbox`` copies these bytes instead of encoding the text
    again (~0.13 CPU s of the 215 M characters in ``bench.curate``'s pages). One page is remembered; the text is
    recognised by identity, so a text replaced in between is encoded as before."""
    global _known_utf8
    _known_utf8 = (text, data)


def _utf8(text: str) -> bytes:
    """``text`` in UTF-8 (surrogates passed through), from ``known_utf8`` when it is that text."""
    global _known_utf8
    known, _known_utf8 = _known_utf8, None
    if known is not None and known[0] is text:
        return known[1]
    return text.encode(*_CODEC)


def run_sandboxed(sandbox: ExtractorSandbox, payload: Any, work: Callable[..., T]) -> tuple[T | None, str | None]:
    """`(result, None)`, or `(None, reason)` when the child ran past the limit or died (OOM-killed)."""
    try:
        return sandbox.process_document(payload, work), None
    except TimeoutError:
        return None, "timeout"
    except EOFError:
        return None, "broken_process"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (``/proc/<pid>/stat``, clock-tick resolution)."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...; utime and stime are 12, 13
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


class CpuTimedSandbox(ExtractorSandbox):
    """`ExtractorSandbox` whose time limit counts the child's CPU seconds for the document (and for its
    start-up), so that what times out is decided by the page, not by how busy the machine is. A child
    that uses no CPU but does not answer (blocked) is stopped after the wall-clock backstop."""

    def __init__(self, timeout: float, warmup_text: Any = "", wall_backstop: float | None = None):
        super().__init__(timeout, warmup_text=warmup_text)
        default_backstop = max(WALL_BACKSTOP_MIN_SECONDS, WALL_BACKSTOP_FACTOR * timeout)
        self.wall_backstop = default_backstop if wall_backstop is None else wall_backstop

    def _answer(self, cpu_at_start: float) -> Any:
        """The child's next message; TimeoutError past the limits, EOFError when the child died."""
        wall_deadline = time.monotonic() + self.wall_backstop
        while not self.parent_conn.poll(_POLL_SECONDS):
            try:
                used = cpu_seconds(self.process.pid) - cpu_at_start
            except (OSError, ValueError):
                used = 0.0  # the child is gone: is_alive says so below
            if not self.process.is_alive():
                raise EOFError("Child process died (probably OOM-killed)")
            if used >= self.timeout or time.monotonic() >= wall_deadline:
                raise TimeoutError(f"the child used {used:.2f} CPU s (limit {self.timeout} s)")
        return self.parent_conn.recv()

    def process_document(self, text: Any, extract_fn: Callable[..., T]) -> T:
        self._ensure_process(extract_fn)
        try:
            cpu_at_start = cpu_seconds(self.process.pid)
            self.parent_conn.send(text)
            result = self._answer(cpu_at_start)
        except (TimeoutError, EOFError):
            self._cleanup_process()
            raise
        if isinstance(result, Exception):
            raise result
        return result

    def _ensure_process(self, extract_fn: Callable[..., Any]) -> None:
        if self.process is not None and self.process.is_alive():
            return
        if self.process is not None:
            self._cleanup_process()
        self.parent_conn, self.child_conn = multiprocessing.Pipe()
        self.process = multiprocessing.Process(target=self._worker, args=(self.child_conn, extract_fn), daemon=True)
        self.process.start()
        self.all_processes.append(self.process)
        try:
            self._answer(0.0)  # the warm-up's "ready", within the same limits (its CPU time from the fork on)
        except (TimeoutError, EOFError):
            self._cleanup_process()
            raise


class SharedTextSandbox(CpuTimedSandbox):
    """`ExtractorSandbox` for `str` payloads whose text travels through an anonymous shared mapping
    that the child inherits when it is forked; only the text's length goes through the pipe.

    Why: pickling a page, pushing it through a 64 KB pipe and reading it back into a growing buffer
    costs the parent and the child several copies and fresh allocations of every page: ~0.3-0.6 CPU s
    for the 215 M characters of HTML in ``bench.curate``'s pages, against ~0.3 s this way (one encode
    and copy in, one decode out). The child only reads the buffer, and the parent writes it only while
    the child waits for work or after it was killed (time limit), so no page is read half written.
    Under a start method other than fork, or for a text larger than the buffer, the payload goes
    through the pipe as before; the child takes either."""

    def __init__(self, timeout: float, buffer_bytes: int = SHARED_BUFFER_BYTES):
        super().__init__(timeout, warmup_text="")
        start_method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
        self.buffer = mmap.mmap(-1, buffer_bytes) if start_method == "fork" else None
        self._reader: _ReadShared | None = None

    def process_document(self, text: str, extract_fn: Callable[[str], T]) -> T:
        if self._reader is None or self._reader.work is not extract_fn:  # a child runs the callable it started with
            self._reader = _ReadShared(extract_fn, self.buffer)
        payload: str | _InBuffer = text
        if self.buffer is not None:
            data = _utf8(text)
            if len(data) <= len(self.buffer):
                self.buffer[: len(data)] = data
                payload = _InBuffer(len(data))
        return super().process_document(payload, self._reader)

    def __exit__(self, exc_type, exc_val, exc_tb):
        super().__exit__(exc_type, exc_val, exc_tb)
        if self.buffer is not None:
            self.buffer.close()


class _InBuffer:
    """The payload is the first ``size`` bytes of the shared buffer."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __reduce__(self):
        return _InBuffer, (self.size,)


class _ReadShared:
    """The child's side: the text out of the buffer (or as sent), then the work."""

    def __init__(self, work: Callable[[str], Any], buffer: mmap.mmap | None):
        self.work = work
        self.buffer = buffer

    def __call__(self, payload: str | _InBuffer) -> Any:
        if isinstance(payload, _InBuffer):
            with memoryview(self.buffer) as view:
                payload = str(view[: payload.size], *_CODEC)
        return self.work(payload)
