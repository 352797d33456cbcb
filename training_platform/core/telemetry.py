"""Prometheus metrics shared by every platform process (API processes, workers, beat), with prometheus_client in
its multiprocess mode: each process writes its counters and histograms to memory-mapped files in one directory and
`/metrics` (any API process) sums them. See docs/observability.md for the families and their labels.

The directory is `$PROMETHEUS_MULTIPROC_DIR`, or `$TP_DATA_DIR/prometheus` when that is unset; it must be set
before prometheus_client creates its first metric, so this module imports it lazily (`_metrics()`) after setting
the variable (and switches prometheus_client to its shared values if something imported it earlier). `tp up` wipes
it when the platform starts (`reset_multiproc_dir`): the files of a previous run's processes would otherwise be
summed forever. Processes started by hand share it the same way; whoever starts them wipes it (before, never while
they run).

Labels are bounded and carry no user data: route templates (never raw paths), methods, status codes, job kinds,
algorithms and outcomes. No user name, job name or per-user figure is ever a label.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("training_platform.core.telemetry")

ENV = "PROMETHEUS_MULTIPROC_DIR"

HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
JOB_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200)

_LABEL_VALUE = re.compile(r"[a-z0-9_.-]{1,32}")


def multiproc_dir() -> Path:
    from training_platform.core.settings import current_settings, get_settings

    configured = current_settings().prometheus_multiproc_dir
    if configured:
        return Path(configured)

    return get_settings().data_path / "prometheus"


def reset_multiproc_dir() -> Path:
    """Empty (create) the multiprocess directory and export it to the children of this process. Call it when the
    platform starts, before any API or worker process runs."""
    path = multiproc_dir()
    if path.is_dir():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    return path


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.http_requests = Counter(
            "tp_http_requests", "HTTP requests handled by the API.", ["method", "route", "status"]
        )
        self.http_duration = Histogram(
            "tp_http_request_duration_seconds",
            "Time spent handling HTTP requests.",
            ["method", "route"],
            buckets=HTTP_BUCKETS,
        )
        self.http_queue = Histogram(
            "tp_http_request_queue_seconds",
            "Time reads waited for admission (TP_API_CONCURRENCY) before being handled.",
            ["method", "route"],
            buckets=HTTP_BUCKETS,
        )
        self.jobs_finished = Counter(
            "tp_jobs_finished",
            "Jobs that reached an end state, by kind, algorithm (data jobs: the operation) and outcome.",
            ["kind", "algorithm", "outcome"],
        )
        self.job_duration = Histogram(
            "tp_job_duration_seconds",
            "From a job's start to its end state (jobs that started), by kind, algorithm and outcome.",
            ["kind", "algorithm", "outcome"],
            buckets=JOB_BUCKETS,
        )
        self.device_seconds = Counter(
            "tp_device_seconds",
            "Device-seconds used by training jobs (devices x wall seconds), by device type (cuda, cpu, mps).",
            ["device"],
        )


_lock = threading.Lock()
_instance: _Metrics | None = None


def _metrics() -> _Metrics:
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                path = multiproc_dir()
                path.mkdir(parents=True, exist_ok=True)
                os.environ.setdefault(ENV, str(path))
                if "prometheus_client.values" in sys.modules:
                    # Imported earlier (by a library or a test) without the variable: prometheus_client chose its
                    # in-process values at import; metrics look `values.ValueClass` up when they are created.
                    from prometheus_client import values

                    if not getattr(values.ValueClass, "_multiprocess", False):
                        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
                _instance = _Metrics()
    return _instance


def label(value: Any) -> str:
    """A bounded label value: known-shaped identifiers pass, anything else is `other`."""
    text = str(value or "").lower()
    return text if _LABEL_VALUE.fullmatch(text) else "other"


def observe_request(method: str, route: str, status: int, seconds: float, queued: float | None = None) -> None:
    m = _metrics()
    m.http_requests.labels(method, route, str(status)).inc()
    m.http_duration.labels(method, route).observe(seconds)
    if queued is not None:
        m.http_queue.labels(method, route).observe(queued)


def observe_job_finished(kind: str, algorithm: str, outcome: str, seconds: float | None) -> None:
    m = _metrics()
    labels = (label(kind), label(algorithm), label(outcome))
    m.jobs_finished.labels(*labels).inc()
    if seconds is not None:
        m.job_duration.labels(*labels).observe(max(0.0, seconds))


def add_device_seconds(device: str, seconds: float) -> None:
    """Count `seconds` device-seconds of `device` (tp_device_seconds_total{device}); seconds <= 0 (or not a finite
    number) are ignored. Never raises: metrics must not break a worker's bookkeeping."""
    try:
        value = float(seconds)
        if not (value > 0 and math.isfinite(value)):
            return
        _metrics().device_seconds.labels(label(device)).inc(value)
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("could not count device-seconds in the metrics")


# -- job outcomes are counted when their transaction commits (a rolled-back transition never happened)

_SESSION_KEY = "tp_finished_jobs"
_hooks_installed = False


def job_finished_on_commit(session: Any, kind: str, algorithm: str, outcome: str, seconds: float | None) -> None:
    _install_session_hooks()
    session.info.setdefault(_SESSION_KEY, []).append((kind, algorithm, outcome, seconds))


def _after_commit(session: Any) -> None:
    for entry in session.info.pop(_SESSION_KEY, ()):
        try:
            observe_job_finished(*entry)
        except Exception:  # noqa: BLE001 - metrics must never break a job's bookkeeping
            log.exception("could not record a finished job in the metrics")


def _after_rollback(session: Any) -> None:
    session.info.pop(_SESSION_KEY, None)


def _install_session_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    with _lock:
        if not _hooks_installed:
            from sqlalchemy import event
            from sqlalchemy.orm import Session

            event.listen(Session, "after_commit", _after_commit)
            event.listen(Session, "after_rollback", _after_rollback)
            _hooks_installed = True


# -- exposition


def render(extra_collectors: tuple[Any, ...] = ()) -> tuple[bytes, str]:
    """(body, content type): every process's counters and histograms summed, plus collectors evaluated now."""
    _metrics()
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=os.environ[ENV])  # type: ignore[no-untyped-call]
    for collector in extra_collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4  # the text format generate_latest writes
