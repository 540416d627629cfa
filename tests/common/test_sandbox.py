"""`SharedTextSandbox`: the child sees exactly the text the parent sent, through the shared buffer or,
when the text does not fit or the start method is not fork, through the pipe; a child killed at its
time limit or dead of its own leaves the next page intact."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from common.sandbox import CpuTimedSandbox, SharedTextSandbox, _InBuffer, cpu_seconds, known_utf8, run_sandboxed
from curate.warc import decode_payload

TEXTS = [
    "",
    "plain ASCII <p>page</p>",
    "accents é, CJK 漢字, emoji 🦀 beyond the BMP",
    "a lone surrogate \ud800 survives as through pickle",
    "x" * 5000,  # larger than the small buffer below: through the pipe
    "short again",  # after a pipe payload, the buffer again
]


def echo(text: str) -> str:
    return text


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def stall_or_echo(text: str) -> str:
    if text.startswith("stall"):
        spin(60)
    if text.startswith("die"):
        os._exit(3)
    return text


def test_every_text_arrives_unchanged_through_the_buffer_or_the_pipe() -> None:
    with SharedTextSandbox(timeout=10.0, buffer_bytes=4096) as sandbox:
        assert sandbox.buffer is not None  # fork: the buffer is used
        assert [sandbox.process_document(text, echo) for text in TEXTS] == TEXTS


def test_payloads_through_the_buffer_carry_only_their_length(monkeypatch) -> None:
    sent = []
    with SharedTextSandbox(timeout=10.0, buffer_bytes=4096) as sandbox:
        sandbox.process_document("warm", echo)  # starts the child
        send = sandbox.parent_conn.send
        monkeypatch.setattr(sandbox.parent_conn, "send", lambda obj: (sent.append(obj), send(obj))[1])
        assert sandbox.process_document("é" * 100, echo) == "é" * 100
        assert sandbox.process_document("y" * 5000, echo) == "y" * 5000
    assert isinstance(sent[0], _InBuffer) and sent[0].size == 200
    assert sent[1] == "y" * 5000


def test_a_page_the_reader_decoded_is_handed_over_in_the_bytes_it_decoded() -> None:
    """The reader announces the UTF-8 bytes of each page it decodes; the hand-over copies them for that very
    str object, and encodes any other text (an equal one built anew included) as before."""
    with SharedTextSandbox(timeout=10.0, buffer_bytes=4096) as sandbox:
        for text in [t for t in TEXTS if t.isascii() or "\ud800" not in t]:
            page = decode_payload(text.encode())
            assert page == text and sandbox.process_document(page, echo) == text
        known_utf8("ab", b"xy")
        assert sandbox.process_document("".join(["a", "b"]), echo) == "ab"
        announced = "cd"
        known_utf8(announced, b"zz")  # not its encoding: shows that the announced bytes are what the child reads
        assert sandbox.process_document(announced, echo) == "zz"
        assert sandbox.process_document(announced, echo) == "cd"  # once only


def test_without_fork_the_text_goes_through_the_pipe(monkeypatch) -> None:
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    with SharedTextSandbox(timeout=10.0) as sandbox:
        assert sandbox.buffer is None
        assert [sandbox.process_document(text, echo) for text in TEXTS] == TEXTS


@pytest.mark.parametrize("failing, reason", [("stall now", "timeout"), ("die now", "broken_process")])
def test_a_failed_child_is_replaced_and_reads_the_next_page_intact(failing: str, reason: str) -> None:
    with SharedTextSandbox(timeout=1.0) as sandbox:
        assert run_sandboxed(sandbox, "before " * 50, stall_or_echo) == ("before " * 50, None)
        assert run_sandboxed(sandbox, failing + " " + "z" * 300, stall_or_echo) == (None, reason)
        assert run_sandboxed(sandbox, "after ü", stall_or_echo) == ("after ü", None)
        assert run_sandboxed(sandbox, "and again", stall_or_echo) == ("and again", None)


def sleep_then_echo(text: str) -> str:
    time.sleep(float(text or 0))  # "" is the warm-up
    return text


def spin_then_echo(text: str) -> str:
    spin(float(text or 0))
    return text


def test_the_limit_counts_cpu_time_not_waiting() -> None:
    """A child that waits 1.5 s but computes for none of it is within a 1 s limit (before: timed out)."""
    with SharedTextSandbox(timeout=1.0) as sandbox:
        assert run_sandboxed(sandbox, "1.5", sleep_then_echo) == ("1.5", None)
    with SharedTextSandbox(timeout=1.0) as sandbox:  # a child keeps the callable it started with
        assert run_sandboxed(sandbox, "0.2", spin_then_echo) == ("0.2", None)
        assert run_sandboxed(sandbox, "60", spin_then_echo) == (None, "timeout")


def test_a_child_that_blocks_is_stopped_by_the_wall_clock_backstop() -> None:
    with CpuTimedSandbox(timeout=1.0, wall_backstop=2.0) as sandbox:
        started = time.monotonic()
        assert run_sandboxed(sandbox, "3600", sleep_then_echo) == (None, "timeout")
        assert time.monotonic() - started < 60
        assert run_sandboxed(sandbox, "0", sleep_then_echo) == ("0", None)


def test_cpu_seconds_of_a_busy_process_grow() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = cpu_seconds(busy.pid)
        time.sleep(0.5)
        assert cpu_seconds(busy.pid) > first
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.e2e
def test_decisions_do_not_depend_on_load() -> None:
    """Pages needing 0.3 CPU s under a 1 s limit, the sandbox child sharing one core with three busy
    processes (it gets at most a quarter of it: >= 1.2 s of wall-clock time per page). Before, every
    page timed out under this load; now every page is extracted, as on a quiet machine."""
    core = min(os.sched_getaffinity(0))
    own = os.sched_getaffinity(0)
    burners = [
        subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
        for _ in range(3)
    ]
    try:
        os.sched_setaffinity(0, {core})  # the sandbox child inherits the one core
        with SharedTextSandbox(timeout=1.0) as sandbox:
            assert [run_sandboxed(sandbox, "0.3", spin_then_echo) for _ in range(2)] == [("0.3", None)] * 2
    finally:
        os.sched_setaffinity(0, own)
        for burner in burners:
            burner.kill()
            burner.wait()
