"""In-context-learning tasks in llm-foundry's three JSONL formats, scored as DCLM's CORE does.

    multiple_choice    {"query": str, "choices": [str, ...], "gold": int}
    schema             {"context_options": [str, ...], "continuation": str, "gold": int}
    language_modeling  {"context": str, "continuation": str}

Prompts follow nanochat's CORE evaluation (`nanochat/core_eval.py`, which reproduces DCLM's numbers
from llm-foundry's files): `k` few-shot examples, each rendered like the item with its gold answer and
followed by a blank line ("\\n\\n"), then the item. multiple_choice renders `query + delimiter + choice`
per choice; schema renders `context_option + delimiter + continuation` per option (the same
continuation scored under each context: Winograd / WinoGrande's partial scoring); language_modeling
renders `context.strip() + delimiter + continuation` and, without the continuation, the same prompt
stripped. The shots are drawn per item with `random.Random(1234 + item).sample` from the task's own
rows without the item (nanochat's draw), or from a separate pool of rows (`fewshot_rows`).

Each prompt is encoded after the prefix token (BOS, else EOS). The scored tokens are, for
multiple_choice, those after the prompts' common token prefix; for schema, the prompts' common token
suffix; for language_modeling, those after the prompt without the continuation. Sequences longer than
the context are cut from the left (the project's rule for every task). Rules:

- choice tasks: `acc` - the choice with the highest *mean* log-probability per scored token is gold
  (ties to the first), CORE's rule;
- language_modeling: `acc` - every continuation token is the model's argmax (greedy exact match, as LAMBADA);
- continuous metrics (DataDecide, OLMo's `gold_bpb`): `gold_prob`, the gold choice's probability
  normalised over the choices (softmax of their summed log-probabilities; choice tasks only), and
  `gold_bpb`, bits per UTF-8 byte of the gold continuation's scored tokens (every task).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.tasks.base import Encoder, Request, Task, TaskDataError, ratio
from evals.tasks.mc import gold_probability
from evals.tasks.texts import read_jsonl

KINDS = ("multiple_choice", "schema", "language_modeling")
EXAMPLE_DELIMITER = "\n\n"
FEWSHOT_SEED = 1234  # nanochat: random.Random(1234 + item index)


def check_row(kind: str, row: Any, where: str) -> None:
    """A row of the wrong schema for `kind` is a TaskDataError naming the file and line."""

    def is_str_list(value: Any) -> bool:
        return isinstance(value, list) and len(value) >= 2 and all(isinstance(v, str) for v in value)

    def gold_ok(options: list) -> bool:
        gold = row.get("gold")
        return isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < len(options)

    if not isinstance(row, dict):
        raise TaskDataError(f"{where}: not a JSON object")
    if kind == "multiple_choice":
        ok = isinstance(row.get("query"), str) and is_str_list(row.get("choices")) and gold_ok(row["choices"])
        want = '{"query": str, "choices": [str, str, ...], "gold": index}'
    elif kind == "schema":
        options = row.get("context_options")
        ok = is_str_list(options) and isinstance(row.get("continuation"), str) and gold_ok(options)
        want = '{"context_options": [str, str, ...], "continuation": str, "gold": index}'
    else:
        ok = isinstance(row.get("context"), str) and isinstance(row.get("continuation"), str)
        ok = ok and bool(row["continuation"].strip())
        want = '{"context": str, "continuation": non-empty str}'
    if not ok:
        raise TaskDataError(f"{where}: not a {kind} row; want {want}")


def render_shot(kind: str, row: Mapping[str, Any], delimiter: str) -> str:
    """One few-shot example with its gold answer, followed by the example delimiter."""
    if kind == "multiple_choice":
        text = row["query"] + delimiter + row["choices"][row["gold"]]
    elif kind == "schema":
        text = row["context_options"][row["gold"]] + delimiter + row["continuation"]
    else:
        text = row["context"].strip() + delimiter + row["continuation"]
    return text + EXAMPLE_DELIMITER


def render_prompts(kind: str, row: Mapping[str, Any], delimiter: str, shots: str) -> list[str]:
    """The prompts of one item: one per choice / context option; for language_modeling (without, with)."""
    if kind == "multiple_choice":
        return [shots + row["query"] + delimiter + choice for choice in row["choices"]]
    if kind == "schema":
        return [shots + option + delimiter + row["continuation"] for option in row["context_options"]]
    head = shots + row["context"].strip() + delimiter
    return [head.strip(), head + row["continuation"]]


def common_length(seqs: Sequence[Sequence[int]], from_end: bool = False) -> int:
    """Length of the token prefix (or suffix) all sequences share."""
    shortest = min(len(s) for s in seqs)
    for i in range(shortest):
        at = -1 - i if from_end else i
        if any(s[at] != seqs[0][at] for s in seqs):
            return i
    return shortest


def scored_counts(kind: str, seqs: Sequence[Sequence[int]]) -> list[int]:
    """How many trailing tokens of each encoded prompt are the scored continuation (at least one)."""
    if kind == "multiple_choice":
        start = common_length(seqs)
        return [max(1, len(s) - start) for s in seqs]
    if kind == "schema":
        suffix = common_length(seqs, from_end=True)
        return [max(1, min(suffix, len(s) - 1)) for s in seqs]
    without, with_cont = seqs
    return [len(with_cont) - common_length([without, with_cont])]


class InContextTask(Task):
    """One llm-foundry ICL file with its type, few-shot count and continuation delimiter."""

    def __init__(
        self,
        name: str,
        kind: str,
        rows: Sequence[Mapping[str, Any]],
        num_fewshot: int = 0,
        delimiter: str = " ",
        fewshot_rows: Sequence[Mapping[str, Any]] | None = None,
        source: str = "",
    ) -> None:
        if kind not in KINDS:
            raise TaskDataError(f"{name}: unknown icl_task_type {kind!r}; choose from {', '.join(KINDS)}")
        if not rows:
            raise TaskDataError(f"{name}: no rows")
        for n, row in enumerate(rows, 1):
            check_row(kind, row, f"{source or name}:{n}")
        self.name, self.kind, self.rows = name, kind, list(rows)
        self.num_fewshot, self.delimiter = num_fewshot, delimiter
        self.fewshot_rows: list[Mapping[str, Any]] | None = None
        if fewshot_rows is not None:
            self.draw_shots_from(fewshot_rows, source)
        elif num_fewshot < 0 or num_fewshot > len(rows) - 1:
            raise TaskDataError(
                f"{name}: {num_fewshot}-shot needs {num_fewshot} example rows besides the item; "
                f"{source or name} offers {len(rows) - 1}"
            )
        self._scored: dict[int, tuple[list[int], int]] = {}  # item -> (scored tokens per request, gold bytes)

    def draw_shots_from(self, rows: Sequence[Mapping[str, Any]], source: str = "") -> None:
        """Draw the shots from `rows` (all of them) instead of the task's other rows: PROVENANCE.md's rule
        for a held-out part, whose shots come from the shared part."""
        for n, row in enumerate(rows, 1):
            check_row(self.kind, row, f"{source or self.name} (few-shot) row {n}")
        if self.num_fewshot < 0 or self.num_fewshot > len(rows):
            raise TaskDataError(
                f"{self.name}: {self.num_fewshot}-shot needs {self.num_fewshot} example rows; "
                f"{source or 'the few-shot pool'} offers {len(rows)}"
            )
        self.fewshot_rows = list(rows)

    @classmethod
    def from_path(
        cls, name: str, kind: str, path: str | Path, num_fewshot: int = 0, delimiter: str = " ", **kwargs: Any
    ) -> InContextTask:
        return cls(name, kind, read_jsonl(path), num_fewshot, delimiter, source=str(path), **kwargs)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def is_choice(self) -> bool:
        return self.kind != "language_modeling"

    def shots(self, item: int) -> str:
        """The item's few-shot block: nanochat's draw from the other rows (or from the few-shot pool)."""
        if not self.num_fewshot:
            return ""
        rng = random.Random(FEWSHOT_SEED + item)
        if self.fewshot_rows is not None:
            picked = [self.fewshot_rows[j] for j in rng.sample(range(len(self.fewshot_rows)), self.num_fewshot)]
        else:  # == rng.sample([i for i in range(n) if i != item], k), without building that list
            picked = [self.rows[j + (j >= item)] for j in rng.sample(range(len(self.rows) - 1), self.num_fewshot)]
        return "".join(render_shot(self.kind, row, self.delimiter) for row in picked)

    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        prompts = [render_prompts(self.kind, self.rows[i], self.delimiter, self.shots(i)) for i in items]
        encoded = iter(encoder.encode([p for group in prompts for p in group]))
        out = []
        for item, group in zip(items, prompts, strict=True):
            seqs = [[encoder.prefix_id, *next(encoded)] for _ in group]
            counts = scored_counts(self.kind, seqs)
            if self.kind == "language_modeling":
                if counts[0] < 1:
                    raise TaskDataError(f"{self.name} row {item + 1}: the continuation has no tokens")
                seqs = seqs[1:]
            gold = 0 if self.kind == "language_modeling" else self.rows[item]["gold"]
            gold_text = encoder.tokenizer.decode(list(seqs[gold][-counts[gold] :]), skip_special_tokens=False)
            reqs = []
            for seq, n in zip(seqs, counts, strict=True):
                cut = seq[-(encoder.context_len + 1) :]
                reqs.append(Request(tuple(cut), min(n, len(cut) - 1)))
            self._scored[item] = ([r.n_scored for r in reqs], len(gold_text.encode("utf-8")))
            out.append(reqs)
        return out

    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        counts, gold_bytes = self._scored.pop(item)
        if self.kind == "language_modeling":
            greedy = getattr(scores[0], "greedy", None)
            if greedy is None:
                raise TypeError("language_modeling needs a scorer that returns Score (with .greedy)")
            return {"acc": float(greedy), "n": 1.0, "gold_nats": -scores[0], "gold_bytes": float(gold_bytes)}
        gold = self.rows[item]["gold"]
        means = [s / n for s, n in zip(scores, counts, strict=True)]
        pred = max(range(len(means)), key=lambda i: (means[i], -i))  # first of the highest
        return {
            "acc": float(pred == gold),
            "n": 1.0,
            "gold_prob": gold_probability(scores, gold),
            "gold_nats": -scores[gold],
            "gold_bytes": float(gold_bytes),
        }

    def keys(self) -> list[str]:
        return (
            ["acc", "n", "gold_prob", "gold_nats", "gold_bytes"]
            if self.is_choice
            else ["acc", "n", "gold_nats", "gold_bytes"]
        )

    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        n = totals.get("n", 0.0)
        out: dict[str, Any] = {"acc": ratio(totals.get("acc", 0.0), n), "n": int(n)}
        if self.is_choice:
            out["gold_prob"] = ratio(totals.get("gold_prob", 0.0), n)
        out["gold_bpb"] = ratio(totals.get("gold_nats", 0.0), math.log(2) * totals.get("gold_bytes", 0.0))
        return out
