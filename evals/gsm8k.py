"""GSM8K-style scoring: the final answer is the number after `####`, compared exactly (commas removed).

Files: JSONL(.gz) with `question` and `answer` (the instructions file's fields; the gold answer's last
`#### N`). A generation is *formatted* when it ends in `#### <number>`; it is *right* when that number
equals the gold one. `evals.generate --gsm8k FILE` generates greedily and reports both rates.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from common.bounded_input import loads_json, open_bounded

_FINAL = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_FORMATTED = re.compile(r"####\s*-?[\d,]*\.?\d+\s*$")


class GSM8KDataError(ValueError):
    """A GSM8K file that cannot be scored: a one-line error."""


@dataclass(frozen=True)
class Problem:
    question: str
    gold: str


def final_answer(text: str) -> str | None:
    """The last number after `####`, commas and a trailing `.0` removed; None when there is none."""
    found = _FINAL.findall(text)
    if not found:
        return None
    number = found[-1].replace(",", "")
    return number[:-2] if number.endswith(".0") else number


def is_formatted(text: str) -> bool:
    """Whether a generation ends in `#### <number>` (the training answers' last line)."""
    return _FORMATTED.search(text.strip()) is not None


def read_problems(path: str | Path) -> list[Problem]:
    """Every problem of the file; a line without a question or a gold `#### N` raises GSM8KDataError."""
    path = Path(path)
    if not path.is_file():
        raise GSM8KDataError(f"GSM8K file {path} does not exist")
    problems = []
    try:
        handle = io.TextIOWrapper(open_bounded(path), encoding="utf-8")  # a FIFO or a 3 GiB file: refused
    except OSError as err:
        raise GSM8KDataError(f"GSM8K file {path}: {err}") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = loads_json(line, path)
            except ValueError:
                raise GSM8KDataError(f"{path}:{number}: not JSON") from None
            gold = final_answer(str(record.get("answer", ""))) if isinstance(record, dict) else None
            if gold is None or not isinstance(record.get("question"), str):
                raise GSM8KDataError(f"{path}:{number}: needs `question` and an `answer` ending in `#### N`")
            problems.append(Problem(record["question"], gold))
    if not problems:
        raise GSM8KDataError(f"{path}: no problems")
    return problems


def score(generations: list[str], problems: list[Problem]) -> dict[str, float | int]:
    """Exact-answer accuracy and the fraction of generations in the `#### <number>` format."""
    right = sum(final_answer(g) == p.gold for g, p in zip(generations, problems, strict=True))
    formatted = sum(is_formatted(g) for g in generations)
    n = len(problems)
    return {"n": n, "exact": right, "accuracy": right / n, "formatted": formatted, "format_rate": formatted / n}
