"""Run independent tasks in parallel: threads in this process by default, worker processes on request.

Tokenizing releases the GIL and fans out over all cores on its own (Rust threads), so a few Python
threads are enough to keep reading, converting and writing overlapped with it: no process start-up, no
pickling. Past a few dozen cores the GIL-bound part (ids -> numpy, ~30 ns a token) becomes the limit;
`workers > 1` then runs that many processes (from a forkserver, so a parent that already runs Arrow or
tokenizers threads cannot hand a child a held lock), each with cores / workers Rust threads. Like any
multiprocessing caller, a script using processes needs the `if __name__ == "__main__":` guard.

`task_runner(runner)` hands every `run_tasks` call in its scope to another engine (`pipelines.ray_cluster.chain`
runs them as Ray tasks): a context variable rather than a parameter, so the build's functions keep their
signatures and this package never imports the executor that uses it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
R = TypeVar("R")

Runner = Callable[[Callable[[T], R], Sequence[T], str], list[R]]
_RUNNER: ContextVar[Runner | None] = ContextVar("mixtures_task_runner", default=None)

PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"
_OFF = ("", "off", "false", "f", "no", "n", "0")  # the values HF tokenizers reads as "off"
_PRELOAD = ["numpy", "pyarrow.parquet", "tokenizers", "mixtures.encode", "mixtures.writer"]


def available_cores() -> int:
    """Cores this process may run on (respects CPU affinity, unlike os.cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_tasks(
    fn: Callable[[T], R], tasks: Sequence[T], workers: int = 1, desc: str = "", progress: bool = True
) -> list[R]:
    """`[fn(t) for t in tasks]` in parallel; results in task order. `workers` > 1 means processes."""
    runner = _RUNNER.get()
    if runner is not None:
        return runner(fn, tasks, desc)
    bar = tqdm(total=len(tasks), desc=desc, unit="task", disable=not progress or not tasks)
    try:
        if len(tasks) <= 1:
            results = [fn(task) for task in tasks]
            bar.update(len(tasks))
            return results
        with _executor(workers, len(tasks)) as pool:
            futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
            out: list[R | None] = [None] * len(tasks)
            for future in as_completed(futures):
                out[futures[future]] = future.result()
                bar.update()
        return out  # type: ignore[return-value]
    finally:
        bar.close()


def on_threads_here(workers: int) -> bool:
    """Whether `run_tasks(..., workers)` runs its tasks on this process's threads (not processes, not another
    engine's): only then can a task wait on something of this process (a file being fetched, parts.py)."""
    return workers <= 1 and _RUNNER.get() is None


@contextmanager
def task_runner(runner: Runner) -> Iterator[None]:
    """Within this block, `run_tasks(fn, tasks, ..., desc)` returns `runner(fn, tasks, desc)` (same order)."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


def _executor(workers: int, n_tasks: int) -> Executor:
    cores = available_cores()
    if workers <= 1:
        return ThreadPoolExecutor(max_workers=min(n_tasks, cores))
    n = min(workers, n_tasks)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=(max(1, cores // n),))


def _init_worker(threads: int) -> None:
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


@contextmanager
def tokenizers_threads_off() -> Iterator[bool]:
    """HF tokenizers' own thread pool off while the block runs; yields whether it is off.

    A fork-join over every `encode_batch_fast` call leaves cores idle at each batch's longest document
    and spins under load; Python threads that each encode a whole batch on one core do not. tokenizers
    reads the variable at every call, so it is set for the block only, and a value the user set wins.
    """
    if PARALLELISM_ENV in os.environ:
        yield tokenizers_threads_are_off()
        return
    os.environ[PARALLELISM_ENV] = "false"
    try:
        yield True
    finally:
        os.environ.pop(PARALLELISM_ENV, None)


def tokenizers_threads_are_off() -> bool:
    """Whether HF tokenizers runs each call on the calling thread only (it is on when unset)."""
    value = os.environ.get(PARALLELISM_ENV)
    return value is not None and value.lower() in _OFF


def ordered_map(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """`map(fn, items)` on `threads` threads, in order, reading at most 2 x threads items ahead."""
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
