"""One call into datatrove's `ExtractorSandbox` (a child process killed after its time limit), with the two
ways a child fails turned into the drop reasons every step that uses one records.

The extraction step and the quality signals both run a document's work in such a child, so that one
hostile page costs its own time limit, not the task's; they name the failures alike (`timeout`,
`broken_process`) in their stats and `removed/<id>/` folders.

`SharedTextSandbox` is that sandbox for large text payloads (HTML pages): the text reaches the child
through a shared memory buffer instead of being pickled through the pipe.
"""

from __future__ import annotations

import mmap
import multiprocessing
from collections.abc import Callable
from typing import Any, TypeVar

from datatrove.pipeline.extractors.base import ExtractorSandbox

T = TypeVar("T")
SHARED_BUFFER_BYTES = 64 << 20  # a 10 M character page in UTF-8 fits unless it is mostly outside the BMP
_CODEC = ("utf-8", "surrogatepass")  # every str round-trips, as through pickle


def run_sandboxed(sandbox: ExtractorSandbox, payload: Any, work: Callable[..., T]) -> tuple[T | None, str | None]:
    """`(result, None)`, or `(None, reason)` when the child ran past the limit or died (OOM-killed)."""
    try:
        return sandbox.process_document(payload, work), None
    except TimeoutError:
        return None, "timeout"
    except EOFError:
        return None, "broken_process"


class SharedTextSandbox(ExtractorSandbox):
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
            data = text.encode(*_CODEC)
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
