"""How a CLI ends on bad input: one line on stderr, `error: ...`, exit status 2, no traceback.

Every CLI of the project validates before it writes, then turns the errors its room raises for bad
input (a config, a missing file, a refused folder) into that line, so a user sees the reason and a
script sees status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import math
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


class Bounded:
    """An argparse `type`: a finite int or float in [low, high], checked while argv is parsed, so an absurd but
    well-formed value (`--cpus 1e30`, `--lr nan`, a count of 2**64) is refused in one line naming the flag and
    the range before any work. The bounds say what a real cluster or model could use, not what a sample needs."""

    def __init__(self, kind: type[int] | type[float], low: float, high: float, *, open_low: bool = False,
                 open_high: bool = False) -> None:  # fmt: skip
        self.kind, self.low, self.high, self.open_low, self.open_high = kind, low, high, open_low, open_high
        self.__name__ = kind.__name__  # argparse names the type in its own messages

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {self.kind.__name__} value: {text!r}") from None
        if not self.holds(value):
            raise argparse.ArgumentTypeError(f"{text!r} is outside the allowed range {self.range}")
        return value

    def holds(self, value: float) -> bool:
        """`value` (already a number) is finite and in range; an int may exceed any float, so it is not converted."""
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return (isinstance(value, int) or math.isfinite(value)) and above and below

    def check(self, value: object, name: str) -> int | float:
        """A config value, typed by YAML or JSON, in range: a ValueError naming `name` and the range otherwise
        (a whole number where `kind` is int; an int where a float is meant is fine)."""
        kinds = int if self.kind is int else (int, float)
        what = "a whole number" if self.kind is int else "a number"
        if isinstance(value, bool) or not isinstance(value, kinds):  # text, a list, 1.5 for a count: no range helps
            raise ValueError(f"{name}: expected {what}, got {value!r}"[:300])
        if not self.holds(value):
            raise ValueError(f"{name} must be {what} in {self.range}, got {value!r}"[:300])
        return value

    @property
    def range(self) -> str:
        low, high = (str(int(v)) if self.kind is int else f"{v:g}" for v in (self.low, self.high))
        return f"{'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"


def integer(low: int, high: int) -> Bounded:
    """An int flag's type: `type=integer(1, 1 << 20)`."""
    return Bounded(int, low, high)


def real(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Bounded:
    """A float flag's type: `type=real(0, 1)`, `real(0, 10, open_low=True)` for (0, 10]; NaN and infinities
    are never in range."""
    return Bounded(float, low, high, open_low=open_low, open_high=open_high)


# Ranges several CLIs share: what the largest real clusters could ask for, far beyond any default.
MAX_CPUS = 1 << 24  # CPUs or tasks of one run: the largest supercomputers have ~10 million cores
MAX_NODE_CPUS = 1 << 14  # CPUs of one node or one task: the largest single machines have a few thousand
MAX_GB_PER_CPU = 1 << 10  # memory per CPU (GB): 1 TB a core is beyond any machine sold
MAX_TASK_MB = 1 << 24  # one task's memory (MB): 16 TiB, the largest single machines
CPUS = integer(1, MAX_CPUS)
NODE_CPUS = integer(1, MAX_NODE_CPUS)
GB_PER_CPU = real(0, MAX_GB_PER_CPU, open_low=True)
SEED = integer(0, (1 << 32) - 1)  # numpy's seeds stop at 2**32 - 1: the same range for every --seed
COUNT = integer(0, 1 << 40)  # documents, items or characters to show or read: 0 often means "all"
BATCH = integer(1, 1 << 16)  # sequences per forward: 65,536 is beyond any accelerator's memory
TOKENS = integer(1, 1 << 20)  # tokens of one sequence (a stride, an answer): a million-token context


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (a missing, unknown or malformed flag) end as every other bad input
    does: one `error:` line naming the flag, exit 2, instead of the whole usage block before it. A flag whose
    type is `Bounded` shows its allowed range in --help."""

    def format_help(self) -> str:
        for action in self._actions:  # argument groups' actions too: they share this list
            kind, text = action.type, action.help or ""
            if isinstance(kind, Bounded) and text != argparse.SUPPRESS and "(range " not in text:
                action.help = f"{text} (range {kind.range})".lstrip()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")


@contextmanager
def errors_as_one_line(*errors: type[BaseException]) -> Iterator[None]:
    """`with errors_as_one_line(SpecError, FileNotFoundError): ...`: those errors end the CLI via `fail`."""
    try:
        yield
    except errors as err:
        fail(err)
