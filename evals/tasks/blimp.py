"""BLiMP, the paper's full-sentence method: a pair is right when the good sentence's total log-probability
is the higher one.

Each sentence is scored as lm-evaluation-harness's `blimp_*` tasks score it: empty context (the
prefix token), continuation " " + sentence (lm-eval's default target delimiter); a tie counts as
right (lm-eval's `argmax` picks the first choice, the good sentence). Input: BLiMP's JSONL rows
(`sentence_good`, `sentence_bad`, `field`, `UID`), `.jsonl` or `.jsonl.gz`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.tasks.base import Encoder, Request, Task, TaskDataError, continuation_requests, ratio
from evals.tasks.texts import read_jsonl

FIELDS = ("sentence_good", "sentence_bad", "field", "UID")
REFERENCE_MODELS = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
DELIMITER = " "


class Blimp(Task):
    name = "blimp"

    def __init__(self, pairs: Sequence[Mapping[str, Any]]) -> None:
        for n, row in enumerate(pairs, 1):
            missing = [f for f in FIELDS if not isinstance(row.get(f), str)]
            if missing:
                raise TaskDataError(f"blimp row {n}: missing {', '.join(missing)}")
        if not pairs:
            raise TaskDataError("blimp: no pairs")
        self.pairs = list(pairs)

    @classmethod
    def from_path(cls, path: str | Path) -> Blimp:
        return cls(read_jsonl(path))

    def __len__(self) -> int:
        return len(self.pairs)

    def requests(self, encoder: Encoder, items: Sequence[int]) -> list[list[Request]]:
        sentences = [("", DELIMITER + self.pairs[i][key]) for i in items for key in ("sentence_good", "sentence_bad")]
        flat = continuation_requests(encoder, sentences)
        return [flat[2 * k : 2 * k + 2] for k in range(len(items))]

    def tally(self, item: int, scores: Sequence[float]) -> Mapping[str, float]:
        row = self.pairs[item]
        right = float(scores[0] >= scores[1])
        return {
            "right": right,
            "n": 1.0,
            f"right/field/{row['field']}": right,
            f"n/field/{row['field']}": 1.0,
            f"right/paradigm/{row['UID']}": right,
            f"n/paradigm/{row['UID']}": 1.0,
        }

    def keys(self) -> list[str]:
        fields = sorted({r["field"] for r in self.pairs})
        paradigms = sorted({r["UID"] for r in self.pairs})
        keys = ["right", "n"]
        for kind, names in (("field", fields), ("paradigm", paradigms)):
            keys += [f"{stat}/{kind}/{name}" for name in names for stat in ("right", "n")]
        return keys

    def metrics(self, totals: Mapping[str, float]) -> dict[str, Any]:
        def by(kind: str) -> dict[str, float]:
            prefix = f"n/{kind}/"
            names = sorted(k[len(prefix) :] for k, v in totals.items() if k.startswith(prefix) and v)
            return {name: ratio(totals.get(f"right/{kind}/{name}", 0.0), totals[prefix + name]) for name in names}

        return {
            "accuracy": ratio(totals.get("right", 0.0), totals.get("n", 0.0)),
            "n": int(totals.get("n", 0)),
            "by_field": by("field"),
            "by_paradigm": by("paradigm"),
        }


def read_reference(path: str | Path) -> dict[str, dict[str, float]]:
    """`models_summary.jsonl` of the BLiMP release: paradigm UID -> reference model -> accuracy."""
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["UID"]] = {k: float(row[k]) for k in REFERENCE_MODELS if k in row}
    return out


def comparison_table(result: Mapping[str, Any], task: Blimp, reference: Mapping[str, Mapping[str, float]]) -> str:
    """Ours beside the reference models, per field and overall, as means over the paradigms evaluated.

    The paper reports means over paradigms; only paradigms present in both are averaged, so each
    row compares the same paradigms.
    """
    ours = result["by_paradigm"]
    field_of = {r["UID"]: r["field"] for r in task.pairs}
    shared = [uid for uid in ours if uid in reference]
    groups = {"overall (paradigm mean)": shared}
    for field in sorted({field_of[u] for u in shared}):
        groups[field] = [u for u in shared if field_of[u] == field]
    head = ["", "paradigms", "ours", *REFERENCE_MODELS.values()]
    rows = [head]
    for label, uids in groups.items():
        cells = [label, str(len(uids)), _pct(sum(ours[u] for u in uids) / len(uids))]
        for key in REFERENCE_MODELS:
            vals = [reference[u][key] for u in uids if key in reference[u]]
            cells.append(_pct(sum(vals) / len(vals)) if vals else "-")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows
    ]
    return "\n".join(lines) + "\n(chance 50.0 %)"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"
