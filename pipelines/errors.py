"""Errors the CLI prints as one line (exit 2); ``ExecutorError`` lives in ``common`` because the Ray executor
there (also ``dedup.run``'s) raises it."""

from common.executor_errors import ExecutorError

__all__ = ["ExecutorError"]
