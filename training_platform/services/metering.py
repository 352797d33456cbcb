"""Metering: each attempt of a training job on its devices becomes a `usage_records` row, opened when the job
enters `running` and closed when it leaves it (services/jobs.transition calls both), with the CPU seconds and
peak memory its worker measures from the training process tree (`record_sample`). services/usage.py reports it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import case, update
from sqlmodel import Session, col, select

from training_platform.core import telemetry
from training_platform.core.settings import get_settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job, JobStatus, UsageRecord, row_id


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def open_attempt(session: Session, job: Job, now: datetime) -> None:
    if job.kind != "train":
        return
    session.add(
        UsageRecord(
            job_id=row_id(job),
            owner_id=job.owner_id,
            attempt=max(job.attempts, 1),
            pool=job.pool or "",
            device=job.device or "cpu",
            devices=job.devices or 1,
            started_at=now,
        )
    )


def close_attempt(session: Session, job: Job, to: JobStatus, now: datetime) -> None:
    """End the job's open record: now, or at its last heartbeat when the recovery sweep requeues a job whose
    worker died (the devices were not used after it)."""
    if job.kind != "train":
        return
    end = now
    if to == JobStatus.queued and job.heartbeat_at is not None:
        last = _aware(job.heartbeat_at)
        if now - last > timedelta(seconds=get_settings().heartbeat_timeout_s):
            end = last
    records = session.exec(
        select(UsageRecord).where(UsageRecord.job_id == row_id(job), col(UsageRecord.ended_at).is_(None))
    ).all()
    for record in records:
        record.ended_at = max(end, _aware(record.started_at))
        session.add(record)
        seconds = record.devices * (record.ended_at - _aware(record.started_at)).total_seconds()
        telemetry.add_device_seconds(record.device, seconds)


def record_sample(session: Session, job_id: int, *, cpu_seconds: float, peak_memory_bytes: int) -> None:
    """The worker's latest measurement of the attempt's process tree onto its open record (or, when the attempt
    has just ended, its last one); one UPDATE that never lowers what was recorded."""
    record_id = session.exec(
        select(UsageRecord.id)
        .where(UsageRecord.job_id == job_id)
        .order_by(col(UsageRecord.ended_at).is_not(None), col(UsageRecord.id).desc())
    ).first()
    if record_id is None:
        return
    cpu, peak = col(UsageRecord.cpu_seconds), col(UsageRecord.peak_memory_bytes)
    session.exec(
        update(UsageRecord)
        .where(col(UsageRecord.id) == record_id)
        .values(
            cpu_seconds=case((cpu < cpu_seconds, cpu_seconds), else_=cpu),
            peak_memory_bytes=case((peak < peak_memory_bytes, peak_memory_bytes), else_=peak),
            sampled_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
