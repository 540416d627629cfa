"""Child processes die with their parent, even when the parent is killed with SIGKILL.

A parent killed without a chance to clean up (SIGKILL, the OOM killer) leaves its children running:
multiprocessing's Manager servers, pool workers and extraction sandboxes, torchrun's ranks (which
run in their own sessions, so a signal to the launcher's process group misses them). Linux's
``PR_SET_PDEATHSIG`` asks the kernel to send the child a signal when its parent thread ends; it is
set in the child (``die_with_parent``), for every multiprocessing child of a process that called
``children_die_with_me`` (through multiprocessing's after-fork hook). Elsewhere (macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from multiprocessing import util

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send `sig` to this process when its parent ends; False where unsupported.

    If the parent is already gone (it died between fork and this call), exit now.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent or parent == 1:  # orphaned before the request took effect
        os._exit(1)
    return True


class _Hook:
    """The after-fork registry holds its objects weakly: this one lives as long as the module."""

    def __call__(self, _: object) -> None:
        die_with_parent()


_HOOK = _Hook()
_REGISTERED: list[bool] = []


def children_die_with_me() -> None:
    """Every multiprocessing child started from now on (and their children, which inherit the hook)
    gets SIGKILL when its parent ends: Manager servers, pool workers, sandboxes. Both the standard
    library's registry and that of `multiprocess` (dill's fork of it, which datatrove's local executor
    uses) get the hook. Idempotent."""
    if _REGISTERED:
        return
    _REGISTERED.append(True)
    util.register_after_fork(_HOOK, _HOOK)
    try:
        from multiprocess import util as dill_util
    except ImportError:
        return
    dill_util.register_after_fork(_HOOK, _HOOK)
