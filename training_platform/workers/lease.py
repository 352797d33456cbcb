"""A worker's lease on a claimed job, one component the training, data and evaluation supervisors hold (by
composition): the heartbeat that keeps the claim alive (and notices when the recovery sweep took it away), and the
only ways to change the job while held — lock it, update fields, finish it (an end state, or a requeue that gives up
after MAX_ATTEMPTS), read it, see a cancel request. `hold(body)` runs a supervisor's work under the lease: heartbeat
on, SIGTERM noted, `JobLost` -> 'lost', a crash -> failed with its first line, never an exception out of the worker.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeGuard

from sqlalchemy import case, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from training_platform.core.procutil import load_libc
from training_platform.core.settings import Settings
from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.models import Job, JobStatus
from training_platform.db.session import session_scope
from training_platform.services import jobs as job_service

log = logging.getLogger("training_platform.workers")

ACTIVE = (JobStatus.preflight.value, JobStatus.running.value)
# Requeues (worker lost, stopped without a cancel request) stop after this many attempts.
MAX_ATTEMPTS = 10


class JobLost(Exception):
    """The job is no longer this worker's (the recovery sweep requeued it, or it finished elsewhere)."""


def owned(job: Job | None, worker: str) -> TypeGuard[Job]:
    """The job is still claimed by `worker` (preflight or running on it)."""
    return job is not None and job.status in ACTIVE and job.worker == worker


class Heartbeater(threading.Thread):
    """Background heartbeat for a claimed job (preflight, waiting for the run lock, training). The UPDATE only
    matches while the job is still ours; when it stops matching, `lost` is set and the supervisor stops."""

    def __init__(self, job_id: int, worker: str, interval_s: float):
        super().__init__(name=f"heartbeat-job-{job_id}", daemon=True)
        self.job_id, self.worker, self.interval_s = job_id, worker, interval_s
        self.step: int | None = None
        self.lost = threading.Event()
        self._stop_event = threading.Event()

    def beat(self) -> bool:
        values: dict[str, Any] = {"heartbeat_at": utcnow()}
        if self.step is not None:
            values["current_step"] = case((col(Job.current_step) < self.step, self.step), else_=col(Job.current_step))
        with session_scope() as session:
            result = session.exec(
                update(Job)
                .where(col(Job.id) == self.job_id, col(Job.worker) == self.worker, col(Job.status).in_(ACTIVE))
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount == 0:
                self.lost.set()
                log.warning(
                    "job %s is no longer owned by %s (requeued or finished elsewhere)", self.job_id, self.worker
                )
                return False
        return True

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                if not self.beat():
                    return
            except SQLAlchemyError as exc:  # the database blipped: try again next interval
                log.warning("job %s: heartbeat failed: %s", self.job_id, exc)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)


class JobLease:
    def __init__(self, job_id: int, worker: str, settings: Settings):
        self.job_id, self.worker, self.settings = job_id, worker, settings
        self.heartbeater = Heartbeater(job_id, worker, settings.heartbeat_interval_s)
        self.shutting_down = False  # the worker process got SIGTERM while holding the lease

    def locked(self, session: Session) -> Job:
        """The job's row, locked for the rest of the transaction and read fresh; JobLost when it is not ours."""
        job = crud.lock_job_row(session, self.job_id)
        if not owned(job, self.worker):
            raise JobLost()
        return job

    def update(self, **fields: Any) -> None:
        with session_scope() as session:
            job = self.locked(session)
            for key, value in fields.items():
                setattr(job, key, value)
            session.add(job)

    def finish(
        self,
        to: str,
        reason: str,
        *,
        error: str | None = None,
        with_end: Callable[[Session], None] | None = None,
        **fields: Any,
    ) -> bool:
        """Move the job (if still ours) to its end state, or requeue it. Returns False if it was not ours any more.
        `with_end(session)` runs in the same transaction when the job ends (not when it is requeued), so whoever
        sees the end state sees its consequences too."""
        requeue = to == JobStatus.queued.value
        self.heartbeater.stop()  # the job leaves this worker now
        with session_scope() as session:
            job = crud.lock_job_row(session, self.job_id)
            if not owned(job, self.worker):
                log.warning("job %s: not finishing as %s, it is no longer ours", self.job_id, to)
                return False
            if requeue and job.attempts >= MAX_ATTEMPTS:
                to, error = JobStatus.failed.value, f"gave up after {job.attempts} attempts; last: {reason}"
                reason, requeue = error, False
            for key, value in fields.items():
                setattr(job, key, value)
            if error is not None:
                job.error = error
            if job.status == JobStatus.preflight.value and to in (JobStatus.succeeded.value,):
                job_service.transition(session, job, JobStatus.running, "previous attempt's process had finished")
            job_service.transition(session, job, to, reason)
            if with_end is not None and not requeue:
                with_end(session)
            kind, priority = job.kind, job.priority
        log.info("job %s -> %s: %s", self.job_id, to, reason)
        if requeue:
            from training_platform.taskqueue.wake import wake_quietly  # imports the Celery app

            wake_quietly(kind, priority)
        return True

    def cancel_requested(self) -> bool:
        with session_scope() as session:
            return bool(session.exec(select(Job.cancel_requested).where(Job.id == self.job_id)).first())

    def read(self) -> Job:
        with session_scope() as session:
            job = session.get(Job, self.job_id)
            if job is None:
                raise JobLost()
            session.expunge(job)
            return job

    def hold(
        self,
        body: Callable[[], str],
        *,
        on_error: Callable[[], None] | None = None,
        on_sigterm: Callable[[], None] | None = None,
    ) -> str:
        """Run `body` (returns the job's final status) under the lease; 'lost' when the job was taken away."""
        load_libc()
        self.heartbeater.start()
        previous_handler = self._install_sigterm(on_sigterm)
        try:
            return body()
        except JobLost:
            log.warning("job %s was taken away from %s", self.job_id, self.worker)
            return "lost"
        except Exception as exc:
            log.exception("job %s: worker error", self.job_id)
            if on_error is not None:
                on_error()
            first = (str(exc).strip().splitlines() or [""])[0]
            with contextlib.suppress(Exception):
                self.finish(
                    JobStatus.failed.value, "worker error", error=f"worker error: {type(exc).__name__}: {first}"
                )
            return JobStatus.failed.value
        finally:
            self.heartbeater.stop()
            if previous_handler is not None:
                with contextlib.suppress(ValueError):
                    signal.signal(signal.SIGTERM, previous_handler)

    def _install_sigterm(self, then: Callable[[], None] | None) -> Any:
        def on_sigterm(signum: int, frame: Any) -> None:
            self.shutting_down = True
            if then is not None:
                then()

        try:
            return signal.signal(signal.SIGTERM, on_sigterm)
        except ValueError:  # not the main thread (tests, thread pools): shutdown then relies on PDEATHSIG
            return None
