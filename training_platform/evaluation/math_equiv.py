"""math-verify equivalence with a timeout that holds on any thread.

math-verify's own timeouts use SIGALRM, which only works on the main thread (elsewhere it raises, or with
`timeout_seconds=None` a pathological expression can hang sympy forever). So:

* on the main thread: math-verify runs in process with its SIGALRM timeouts;
* on any other thread (API workers, thread pools): the comparison runs in a long-lived helper process
  (`python -m training_platform.evaluation.math_equiv`, JSON lines over pipes) whose main thread uses the SIGALRM
  timeouts; the caller additionally waits at most `timeout` + a grace period and kills and restarts the helper if
  it does not answer. A timed-out comparison counts as "not equal".

`verify(gold, pred)` is asymmetric: the gold answer always goes first.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import select
import subprocess
import sys
import threading
from typing import Any

__all__ = ["math_verify_equal", "shutdown_worker"]

_STARTUP_TIMEOUT_S = 120.0  # importing sympy + math-verify: ~1-2 s normally, far more on a loaded machine
_GRACE_S = 2.0


def _mv_parse(math_verify: Any, text: str, timeout: int | None) -> list:
    # math-verify only extracts LaTeX between delimiters: wrap bare answers ("\frac{1}{2}", "x^2+1") in $...$.
    wrapped = text if "$" in text or "\\boxed" in text else f"${text}$"
    parsed = math_verify.parse(wrapped, parsing_timeout=timeout)
    if not parsed and wrapped != text:
        parsed = math_verify.parse(text, parsing_timeout=timeout)
    return parsed


def _verify_inline(gold: str, pred: str, timeout: float) -> bool:
    """In this thread; must be the main thread when timeout is used (SIGALRM)."""
    import math_verify  # lazy: heavy (sympy, latex2sympy)

    seconds = max(1, math.ceil(timeout)) if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = _mv_parse(math_verify, gold, seconds)
        pred_parsed = _mv_parse(math_verify, pred, seconds)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=seconds))
    except Exception:  # noqa: BLE001 - a malformed answer is simply not equal
        return False


class _Worker:
    def __init__(self, argv: list[str] | None = None, grace_s: float = _GRACE_S) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.argv = argv or [sys.executable, "-m", "training_platform.evaluation.math_equiv"]
        self.restarts = 0

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [_package_root(), env.get("PYTHONPATH", "")] if p)
        self.restarts += 1
        proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        if _readline(proc, _STARTUP_TIMEOUT_S) != "ready":
            _kill(proc)
            raise RuntimeError("the math-verify helper process did not start")
        return proc

    def verify(self, gold: str, pred: str, timeout: float) -> bool:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None  # started with pipes
            try:
                proc.stdin.write(json.dumps([gold, pred, timeout]) + "\n")
                proc.stdin.flush()
            except OSError:
                self._reset()
                return False
            line = _readline(proc, timeout + self.grace_s)
            if line is None:  # hung or died: kill it, the next call starts a fresh one
                self._reset()
                return False
            return line == "1"

    def _reset(self) -> None:
        if self._proc is not None:
            _kill(self._proc)
        self._proc = None

    def shutdown(self) -> None:
        with self._lock:
            self._reset()


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    return line.strip() if line else None


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


_worker = _Worker()
atexit.register(_worker.shutdown)


def shutdown_worker() -> None:
    """Stop the helper process (it is restarted on demand)."""
    _worker.shutdown()


def math_verify_equal(gold: str, pred: str, *, timeout: float = 5.0, isolate: bool | None = None) -> bool:
    """math-verify `verify(parse(gold), parse(pred))` with a timeout; False on timeout or parse failure.

    `isolate`: None -> in process on the main thread, in the helper process elsewhere; True -> always the helper.
    """
    if isolate is None:
        isolate = threading.current_thread() is not threading.main_thread()
    if not isolate:
        return _verify_inline(gold, pred, timeout)
    return _worker.verify(gold, pred, timeout)


def _serve() -> None:
    import math_verify  # noqa: F401 - import before announcing readiness

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            gold, pred, timeout = json.loads(line)
            ok = _verify_inline(str(gold), str(pred), float(timeout))
        except Exception:  # noqa: BLE001
            ok = False
        print("1" if ok else "0", flush=True)


if __name__ == "__main__":
    _serve()
