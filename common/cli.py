"""How a CLI ends on bad input: one line on stderr, `error: ...`, exit status 2, no traceback.

Every CLI of the project validates before it writes, then turns the errors its room raises for bad
input (a config, a missing file, a refused folder) into that line, so a user sees the reason and a
script sees status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

USAGE_ERROR = 2
MAX_LINE_CHARS = 2000


def one_line(message: object) -> str:
    """`message` as one line: a multi-line message joined with "; ", a KeyError without its quotes, control
    characters escaped (a name holding ESC sequences must not drive the terminal), at most 2,000 characters
    (a message that quotes a huge value stays a line)."""
    if isinstance(message, KeyError) and message.args:
        message = message.args[0]
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    text = "; ".join(lines) or type(message).__name__
    text = "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."


def fail(message: object) -> NoReturn:
    """Print `error: message` on stderr as one line and exit with status 2."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (a missing, unknown or malformed flag) end as every other bad input
    does: one `error:` line naming the flag, exit 2, instead of the whole usage block before it."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")


@contextmanager
def errors_as_one_line(*errors: type[BaseException]) -> Iterator[None]:
    """`with errors_as_one_line(SpecError, FileNotFoundError): ...`: those errors end the CLI via `fail`."""
    try:
        yield
    except errors as err:
        fail(err)
