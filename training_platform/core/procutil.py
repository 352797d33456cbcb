"""Child processes that die with their parent (Linux `prctl(PR_SET_PDEATHSIG)`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
_libc: Any = None


def load_libc() -> Any:
    """libc via ctypes (Linux only), loaded before any fork: a forked child must not run the dynamic loader."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child gets `sig` when the process that started it dies.

    The kernel sends it when the *thread* that forked the child exits, so call Popen from a long-lived thread
    (the main thread). The setting survives exec. Returns None where prctl does not exist (not Linux)."""
    libc = load_libc()
    if libc is None:
        return None
    parent_pid = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent_pid:  # the parent died between fork() and prctl()
            os.kill(os.getpid(), sig)

    return preexec
