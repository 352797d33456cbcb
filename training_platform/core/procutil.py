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


class ProcessTreeMeter:
    """CPU seconds and peak memory of a process and its descendants, measured (psutil), not estimated.

    `sample()` reads every live process of the tree: the sum of their RSS (the peak of that sum is kept) and their
    CPU time. A process that exited and was waited for moves its time into its parent's `children_*` times, so
    while the tree runs the CPU figure is the largest seen; `finish()` takes the exact figure from the kernel's
    account of this process's waited-for children (getrusage), from a baseline taken before the root started."""

    def __init__(self) -> None:
        import resource

        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._baseline = usage.ru_utime + usage.ru_stime
        self._root: Any = None
        self.cpu_seconds = 0.0
        self.peak_memory_bytes = 0

    def attach(self, pid: int) -> None:
        import psutil

        try:
            self._root = psutil.Process(pid)
        except psutil.Error:
            self._root = None

    def sample(self) -> None:
        import psutil

        if self._root is None:
            return
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        rss, cpu = 0, 0.0
        for proc in procs:
            try:
                rss += proc.memory_info().rss
                t = proc.cpu_times()
                cpu += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                continue
        self.peak_memory_bytes = max(self.peak_memory_bytes, rss)
        self.cpu_seconds = max(self.cpu_seconds, cpu)

    def finish(self) -> None:
        """After the root was waited for: the kernel's CPU account of the whole tree."""
        import resource

        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_seconds = max(self.cpu_seconds, usage.ru_utime + usage.ru_stime - self._baseline)
