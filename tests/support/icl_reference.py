"""An independent CORE-style scorer for one llm-foundry ICL row: the oracle of `evals.tasks.icl`.

Written from the rule (DCLM / nanochat's CORE evaluation), not from our code: `transformers`' tokenizer
and model, one unbatched full-logit forward per prompt, the few-shot rows drawn from an explicit list
of the other rows, losses and argmax predictions over the whole vocabulary.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch


class ReferenceIcl:
    def __init__(self, hf_dir: Path, prefix_id: int, context_len: int) -> None:
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        self.tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(hf_dir) / "tokenizer.json"))
        self.model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        self.prefix_id, self.context_len = prefix_id, context_len

    def ids(self, text: str) -> list[int]:
        return [self.prefix_id, *self.tok(text, add_special_tokens=False)["input_ids"]]

    @torch.no_grad()
    def losses_and_hits(self, ids: list[int], start: int) -> tuple[list[float], list[bool]]:
        """Per-token loss and argmax hit of ids[start:], the sequence cut from the left to the context."""
        keep = ids[-(self.context_len + 1) :]
        start = max(1, start - (len(ids) - len(keep)))
        x = torch.tensor([keep])
        logits = self.model(input_ids=x).logits[0].double()
        loss = torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:], reduction="none")
        hits = logits[:-1].argmax(-1) == x[0, 1:]
        return loss[start - 1 :].tolist(), hits[start - 1 :].tolist()

    def correct(self, kind: str, rows: Sequence[Mapping[str, Any]], index: int, shots: int, delimiter: str) -> bool:
        row = rows[index]
        others = [r for i, r in enumerate(rows) if i != index]
        examples = random.Random(1234 + index).sample(others, shots) if shots else []
        if kind == "language_modeling":
            prefix = "".join(f"{e['context'].strip()}{delimiter}{e['continuation']}\n\n" for e in examples)
            without = (prefix + row["context"].strip() + delimiter).strip()
            full = self.ids(prefix + row["context"].strip() + delimiter + row["continuation"])
            n_without = len(self.ids(without))
            assert full[:n_without] == self.ids(without)
            return all(self.losses_and_hits(full, n_without)[1])
        if kind == "multiple_choice":
            prefix = "".join(f"{e['query']}{delimiter}{e['choices'][e['gold']]}\n\n" for e in examples)
            seqs = [self.ids(prefix + row["query"] + delimiter + c) for c in row["choices"]]
            start = 0
            while all(len(s) > start for s in seqs) and len({s[start] for s in seqs}) == 1:
                start += 1
            starts = [min(start, len(s) - 1) for s in seqs]
        else:  # schema: the shared continuation after each context option
            prefix = "".join(f"{e['context_options'][e['gold']]}{delimiter}{e['continuation']}\n\n" for e in examples)
            seqs = [self.ids(prefix + o + delimiter + row["continuation"]) for o in row["context_options"]]
            tail = 0
            while all(len(s) > tail for s in seqs) and len({s[-1 - tail] for s in seqs}) == 1:
                tail += 1
            starts = [len(s) - max(1, min(tail, len(s) - 1)) for s in seqs]
        mean_loss = [
            sum(ls) / len(ls) for ls in (self.losses_and_hits(s, a)[0] for s, a in zip(seqs, starts, strict=True))
        ]
        return mean_loss.index(min(mean_loss)) == row["gold"]
