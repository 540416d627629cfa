"""Errors the CLI prints as one line (exit 2), defined below every executor so none imports another."""


class ExecutorError(RuntimeError):
    """A stage cannot run or did not finish on its executor: the CLI prints it as one line."""
