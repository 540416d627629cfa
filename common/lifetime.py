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
import importlib
import os
import signal
import sys
from types import ModuleType

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LAUNCHER_PID = "CC2MODEL_LAUNCHER_PID"  # set by trainer.launch for its ranks: the parent they must have


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel send `sig` to this process when its parent ends; False where unsupported.

    `parent`: the pid the parent had (known to multiprocessing); if this process already has another
    parent (it was orphaned between fork and this call), it exits now.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # orphaned before the request took effect
        os._exit(1)
    return True


def die_with_launcher() -> None:
    """In a torchrun rank: die with the launcher, checked against the launcher's pid when it was started by
    ``trainer.launch`` (which exports it), so that a rank whose launcher was killed while the rank started
    (before it could register) exits at once instead of running on under init. Call it before importing
    torch: the import takes seconds, a window in which the launcher could die unnoticed (the audit's 64
    orphaned ranks). Outside torchrun it does nothing."""
    launcher = os.environ.get(LAUNCHER_PID)
    if launcher is not None and launcher.isdigit():
        die_with_parent(parent=int(launcher))
    elif "TORCHELASTIC_RUN_ID" in os.environ:
        die_with_parent()


class _Hook:
    """Runs in each new multiprocessing child of `library` (the after-fork registry holds it weakly: the
    module keeps it alive)."""

    def __init__(self, library: ModuleType) -> None:
        self.library = library

    def __call__(self, _: object) -> None:
        parent = self.library.parent_process()
        die_with_parent(parent=parent.pid if parent is not None else None)


_HOOKS: list[_Hook] = []


def children_die_with_me() -> None:
    """Every multiprocessing child started from now on (and their children, which inherit the hook)
    gets SIGKILL when its parent ends: Manager servers, pool workers, sandboxes. Both the standard
    library's registry and that of `multiprocess` (dill's fork of it, which datatrove's local executor
    uses) get the hook. Idempotent."""
    if _HOOKS:
        return
    import multiprocessing

    libraries: list[ModuleType] = [multiprocessing]
    try:
        import multiprocess
    except ImportError:
        pass
    else:
        libraries.append(multiprocess)
    for library in libraries:
        _HOOKS.append(_Hook(library))
        importlib.import_module(f"{library.__name__}.util").register_after_fork(_HOOKS[-1], _HOOKS[-1])
