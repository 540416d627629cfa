"""`SharedTextSandbox`: the child sees exactly the text the parent sent, through the shared buffer or,
when the text does not fit or the start method is not fork, through the pipe; a child killed at its
time limit or dead of its own leaves the next page intact."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from common.sandbox import SharedTextSandbox, _InBuffer, run_sandboxed

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


def stall_or_echo(text: str) -> str:
    if text.startswith("stall"):
        time.sleep(30)
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
