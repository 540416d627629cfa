"""One call into datatrove's `ExtractorSandbox` (a child process killed after its time limit), with the two
ways a child fails turned into the drop reasons every step that uses one records.

The extraction step and the quality signals both run a document's work in such a child, so that one
hostile page costs its own time limit, not the task's; they name the failures alike (`timeout`,
`broken_process`) in their stats and `removed/<id>/` folders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from datatrove.pipeline.extractors.base import ExtractorSandbox

T = TypeVar("T")


def run_sandboxed(sandbox: ExtractorSandbox, payload: Any, work: Callable[..., T]) -> tuple[T | None, str | None]:
    """`(result, None)`, or `(None, reason)` when the child ran past the limit or died (OOM-killed)."""
    try:
        return sandbox.process_document(payload, work), None
    except TimeoutError:
        return None, "timeout"
    except EOFError:
        return None, "broken_process"
