"""Train (and optionally quantize) a fastText supervised model in a fresh child process.

With the installed fastText wheel, a training that follows other fastText work in the same process
sometimes fails with "Encountered NaN." and every later one in that process fails too, while the
first training of a fresh process has always succeeded. So each training gets its own process
(spawned, not forked), and a failed one is retried once in another.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

NAN_MESSAGE = "Encountered NaN"


def _train_child(params: dict[str, Any], out: str, quantize: dict[str, Any] | None) -> None:
    import fasttext

    model = fasttext.train_supervised(**params)
    if quantize is not None:
        model.quantize(**quantize)
    model.save_model(out)


def train_supervised(
    params: dict[str, Any], out: str | Path, quantize: dict[str, Any] | None = None, attempts: int = 2
) -> None:
    """``fasttext.train_supervised(**params)`` then ``quantize(**quantize)``, saved to ``out``."""
    context = multiprocessing.get_context("spawn")
    for attempt in range(attempts):
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            try:
                pool.submit(_train_child, params, str(out), quantize).result()
                return
            except RuntimeError as err:
                if NAN_MESSAGE not in str(err) or attempt == attempts - 1:
                    raise
