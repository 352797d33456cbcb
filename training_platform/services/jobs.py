"""Jobs, the use cases the API and the workers share: every status change goes through `transition()`, which
enforces the state machine (db/models.TRANSITIONS), records the JobEvent and, for an end state, counts it in the
metrics and notifies the owner's webhooks once the session commits."""

from __future__ import annotations

from sqlmodel import Session

from training_platform.core import telemetry
from training_platform.core.timeutil import utcnow
from training_platform.db.models import TERMINAL, TRANSITIONS, IllegalTransition, Job, JobEvent, JobStatus, row_id
from training_platform.services import metering, webhooks


def transition(session: Session, job: Job, to: JobStatus | str, reason: str = "") -> JobEvent:
    """Move a job along the state machine (raises IllegalTransition) and record the event."""
    current, target = JobStatus(job.status), JobStatus(to)
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"job {job.id}: {current.value} -> {target.value} is not allowed")
    now = utcnow()
    if current == JobStatus.running:
        metering.close_attempt(session, job, target, now)
    job.status = target.value
    job.updated_at = now
    if target == JobStatus.running and job.started_at is None:
        job.started_at = now
    if target in TERMINAL:
        job.finished_at = now
        started = job.started_at
        if started is not None and started.tzinfo is None:
            started = started.replace(tzinfo=now.tzinfo)
        telemetry.job_finished_on_commit(
            session,
            job.kind,
            job.algorithm,
            target.value,
            (now - started).total_seconds() if started is not None else None,
        )
    if target == JobStatus.running:
        metering.open_attempt(session, job, now)
    if target == JobStatus.queued:
        job.queued_at = now
        job.finished_at = None
        job.worker = None
        job.heartbeat_at = None
    event = JobEvent(job_id=row_id(job), from_status=current.value, to_status=target.value, reason=reason)
    session.add(job)
    session.add(event)
    session.flush()
    if target in TERMINAL:  # the owner's job-end webhooks, once this commits (delivered by a maintenance worker)
        webhooks.job_ended_on_commit(session, job, event)
    return event
