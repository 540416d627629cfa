"""Small shared pieces of the evals tests: BLiMP subsets and a plain transformers log-prob oracle."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from evals.tasks.base import Request
from tests.evals.conftest import shared_or_skip

REPO = Path(__file__).resolve().parents[2]
MC_EXAMPLE = REPO / "examples" / "evals" / "mc_example.jsonl"


def blimp_spread(n: int) -> list[dict]:
    """`n` BLiMP pairs spread evenly over the file (so most paradigms appear), in file order."""
    path = shared_or_skip("blimp", "blimp.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    step = max(1, len(rows) // n)
    return rows[::step][:n]


def write_jsonl(rows: Sequence[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class TransformersOracle:
    """log p(tokens[i] | tokens[:i]) from a plain `LlamaForCausalLM` forward, one sequence at a time, fp64 softmax."""

    def __init__(self, hf_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()

    @torch.no_grad()
    def token_logprobs(self, tokens: Sequence[int]) -> list[float]:
        """Log-prob of each token after the first, given all before it."""
        x = torch.tensor([list(tokens)])
        logp = self.model(input_ids=x).logits[0, :-1].double().log_softmax(-1)
        return logp.gather(1, x[0, 1:, None]).squeeze(1).tolist()

    def score(self, request: Request) -> float:
        return math.fsum(self.token_logprobs(request.tokens)[-request.n_scored :])
