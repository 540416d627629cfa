"""Multiple choice from a local JSONL file: one question per line,

    {"context": "Question: ...\\nAnswer:", "choices": ["...", "..."], "gold": 0}

Each choice is scored as the continuation " " + choice of the context (lm-eval's default target
delimiter; an empty context means the prefix token). `acc`: the highest summed log-probability is
the gold choice; `acc_norm`: the same after dividing each log-probability by the choice's length in
characters (lm-eval's definition). Ties go to the first choice, as `numpy.argmax` does. Continuous
metrics (DataDecide; OLMo's `gold_bpb`): `gold_prob`, the gold choice's probability normalised over the
choices (softmax of the summed log-probabilities), and `gold_bpb`, the gold continuation's bits per
UTF-8 byte (" " + choice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.tasks.base import Encoder, Request, Task, TaskDataError, continuation_requests, ratio
from evals.tasks.texts import read_jsonl

DELIMITER = " "


def first_argmax(values: Sequence[float]) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


class MultipleChoice(Task):
    name = "mc"

    def __init__(self, questions: Sequence[Mapping[str, Any]]) -> None:
        if not questions:
            raise TaskDataError("mc: no questions")
        for n, q in enumerate(questions, 1):
            if not isinstance(q, Mapping):  # a JSON list or number on a line
                raise TaskDataError(f"mc row {n}: a JSON object is expected, got a {type(q).__name__}")
            partial = "contexts" in q
            key = "contexts" if partial else "choices"
            choices = q.get(key)
            if not isinstance(q.get("continuation" if partial else "context"), str):
                raise TaskDataError(f"mc row {n}: `{'continuation' if partial else 'context'}` must be a string")
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
                raise TaskDataError(f"mc row {n}: `{key}` must be a list of at least 2 non-empty strings")
            gold = q.get("gold")
            if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(choices):
                raise TaskDataError(f"mc row {n}: `gold` must be an index into `{key}`")
        self.questions = list(questions)

    def options(self, item: int) -> tuple[list[tuple[str, str]], list[str]]:
        """The (context, continuation) pair of each option and the texts `acc_norm` divides by (lm-eval's
        choices: the answers, or the contexts of a partial row)."""
        q = self.questions[item]
        if "contexts" in q:
            return [(c, DELIMITER + q["continuation"]) for c in q["contexts"]], q["contexts"]
        return [(q["context"], DELIMITER + c) for c in q["choices"]], q["choices"]

    @classmethod
    def from_path(cls, path: str | Path) -> MultipleChoice:
        return cls(read_jsonl(path))

    def __len__(self) -> int:
        return len(self.questions)

    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        pairs = [pair for i in items for pair in self.options(i)[0]]
        flat = continuation_requests(encoder, pairs)
        out, at = [], 0
        for i in items:
            k = len(self.options(i)[1])
            out.append(flat[at : at + k])
            at += k
        return out

    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        pairs, norm_texts = self.options(item)
        gold = self.questions[item]["gold"]
        normed = [s / len(c) for s, c in zip(scores, norm_texts, strict=True)]
        return {
            "acc": float(first_argmax(scores) == gold),
            "acc_norm": float(first_argmax(normed) == gold),
            "n": 1.0,
            "gold_prob": gold_probability(scores, gold),
            "gold_nats": -scores[gold],
            "gold_bytes": float(len(pairs[gold][1].encode("utf-8"))),
        }

    def keys(self) -> list[str]:
        return ["acc", "acc_norm", "n", "gold_prob", "gold_nats", "gold_bytes"]

    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        n = totals.get("n", 0.0)
        return {
            "acc": ratio(totals.get("acc", 0.0), n),
            "acc_norm": ratio(totals.get("acc_norm", 0.0), n),
            "n": int(n),
            "gold_prob": ratio(totals.get("gold_prob", 0.0), n),
            "gold_bpb": ratio(totals.get("gold_nats", 0.0), math.log(2) * totals.get("gold_bytes", 0.0)),
        }


def gold_probability(scores: Sequence[float], gold: int) -> float:
    """The gold choice's share of the choices' probability mass (a stable softmax of summed log-probs)."""
    top = max(scores)
    return math.exp(scores[gold] - top) / math.fsum(math.exp(s - top) for s in scores)
