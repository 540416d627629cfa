"""`rank0_verdict` over a real gloo group of two processes: rank 0's outcome reaches every rank, whatever it is
(a refusal, or an error it was not told of: a defect, a store client's error that is no OSError), so no rank
waits in the next collective for a rank 0 that died alone."""

from __future__ import annotations

import multiprocessing as mp
from datetime import timedelta
from typing import Any

from tests.support.s3_server import free_port


def _refuse() -> None:
    raise ValueError("refused")


def _fail() -> None:
    raise KeyError("boom")


def _rank(rank: int, port: int, results: Any) -> None:
    import torch.distributed as dist

    from trainer.distributed import rank0_verdict

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=30)
    )
    said = [rank0_verdict(lambda: "ok", ValueError)]
    for check in (_refuse, _fail):
        try:
            rank0_verdict(check, ValueError)
        except Exception as err:  # noqa: BLE001 - what each rank raised is the result
            said.append(f"{type(err).__name__}: {err}")
    dist.destroy_process_group()
    results.put((rank, said))


def test_every_rank_raises_rank_0s_outcome() -> None:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(rank, port, results)) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    try:
        said = dict(results.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert said[0] == ["ok", "ValueError: refused", "KeyError: 'boom'"]  # rank 0 raises its own error
    assert said[1] == [None, "ValueError: refused", "RuntimeError: rank 0 failed: KeyError: 'boom'"]
