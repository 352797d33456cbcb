"""Joining the platform's Ray cluster as a driver: one way for the data factory's Ray Data stages and the evaluation
actors (the Ray Train launcher joins for a training run with the same worker environment, core/settings.py).

- `unreachable(address)`: a quick TCP connect to the GCS first; Ray's client retries a dead address for tens of
  seconds (or aborts the process).
- `joined(address)`: connected for the duration, unless this process already is (then it is used as it is). Ray's
  workers get the driver's paths and offline flags only (`ray_worker_env`: no tokens, no keys). `ray.init` takes
  SIGINT/SIGTERM; the caller's handlers are put back (a worker's SIGTERM means "stop", not "exit now").
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator

from training_platform.core.settings import ray_worker_env


class ClusterUnavailable(ConnectionError):
    """No cluster to join, one that does not answer, or one that refused the driver: the reason, for the caller to
    name its own field (`executor`)."""


def unreachable(address: str, timeout_s: float = 3.0) -> str | None:
    """Why `address` (host:port, or ray://host:port) does not accept a connection, or None when it does."""
    if address in ("auto", "local"):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            return None
    except ValueError:
        return f"{address!r} is not a host:port Ray address"
    except OSError as exc:
        return f"the Ray cluster at {address} cannot be reached: {exc.strerror or type(exc).__name__}"


def _real_file(stream: object) -> bool:
    try:
        stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def joined(address: str | None, *, log_to_driver: bool = False) -> Iterator[bool]:
    """Connected to the cluster at `address` for the duration; yields whether this call joined (and leaves after).
    `log_to_driver`: the workers' output is copied to this process's stdout/stderr, when they are real files (a
    Celery worker's are logging proxies, which Ray cannot write to: the output then stays in Ray's log files)."""
    import ray

    if ray.is_initialized():
        yield False
        return
    address = (address or "").strip()
    if not address:
        raise ClusterUnavailable("ray needs a cluster: set TP_RAY_ADDRESS (host:port) or pass its address")
    if (problem := unreachable(address)) is not None:
        raise ClusterUnavailable(problem)
    env = ray_worker_env()
    real_stderr = sys.__stderr__
    if not faulthandler.is_enabled() and not _real_file(sys.stderr) and real_stderr and _real_file(real_stderr):
        # ray.init enables it on sys.stderr, which in a Celery worker is a logging proxy with no file: it would fail
        faulthandler.enable(file=real_stderr, all_threads=False)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(
            address=address,
            runtime_env={"env_vars": env} if env else None,
            logging_level=logging.WARNING,
            log_to_driver=log_to_driver and _real_file(sys.stdout) and _real_file(sys.stderr),
            configure_logging=False,
        )
    except Exception as exc:  # noqa: BLE001 - any failure to join is the same refusal, with Ray's reason
        raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {exc}") from exc
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, handler)
    try:
        yield True
    finally:
        ray.shutdown()
