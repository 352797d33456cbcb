"""Data access shared by the API and the workers: the job state machine, metrics, checkpoints, users, tokens.

Every status change goes through `services.jobs.transition()`, which enforces the state machine and writes a JobEvent.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, or_, text, update
from sqlalchemy.sql.dml import Insert
from sqlmodel import Session, col, select

from training_platform.core.timeutil import utcnow
from training_platform.db import rollups
from training_platform.db.models import (
    ApiToken,
    Checkpoint,
    GateReportRecord,
    Job,
    JobEvent,
    JobStatus,
    MetricPoint,
    User,
    row_id,
)

TOKEN_PREFIX = "tp_"
METRIC_INSERT_CHUNK = 10_000


# ---------------------------------------------------------------------------------------------- users & tokens


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(session: Session, name: str, *, is_admin: bool = False) -> tuple[User, str]:
    """Create a user and its first API token. The token is returned once and only its hash is stored."""
    if session.exec(select(User).where(User.name == name)).first() is not None:
        raise ValueError(f"user {name!r} already exists")
    user = User(name=name, is_admin=is_admin)
    session.add(user)
    session.flush()
    return user, issue_token(session, user)


def issue_token(session: Session, user: User) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiToken(user_id=row_id(user), token_hash=hash_token(token), prefix=token[:10]))
    session.flush()
    return token


def user_for_token(session: Session, token: str) -> User | None:
    # One statement: every authenticated request runs it.
    return session.exec(
        select(User)
        .join(ApiToken, col(ApiToken.user_id) == User.id)
        .where(ApiToken.token_hash == hash_token(token), ApiToken.revoked == False)  # noqa: E712
    ).first()


# ---------------------------------------------------------------------------------------------- jobs


def create_job(
    session: Session,
    *,
    owner: User,
    name: str,
    config: dict,
    priority: int = 0,
    kind: str = "train",
    cloned_from: int | None = None,
    sweep_id: int | None = None,
    tags: list[str] | None = None,
    note: str = "",
) -> Job:
    algorithm = (config.get("algorithm") or {}).get("name", "?")
    max_steps = (config.get("training") or {}).get("max_steps")
    job = Job(
        owner_id=row_id(owner),
        name=name,
        kind=kind,
        algorithm=algorithm,
        config=config,
        priority=priority,
        max_steps=max_steps,
        cloned_from=cloned_from,
        sweep_id=sweep_id,
        tags=list(tags or []),
        note=note,
        queued_at=utcnow(),
    )
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=row_id(job), from_status=None, to_status=JobStatus.queued.value, reason="submitted"))
    session.flush()
    return job


def claim_values(worker: str, task_id: str | None, now: datetime) -> dict[str, Any]:
    """The columns a claim sets (queued -> preflight on `worker`), for an UPDATE ... WHERE status = 'queued'."""
    return {
        "status": JobStatus.preflight.value,
        "worker": worker,
        "heartbeat_at": now,
        "attempts": Job.attempts + 1,
        "updated_at": now,
        "celery_task_id": task_id,
        "error": None,
        "preflight": None,
        "finished_at": None,
    }


def heartbeat(session: Session, job: Job, worker: str, step: int | None = None) -> None:
    job.heartbeat_at = utcnow()
    job.worker = worker
    if step is not None:
        job.current_step = max(job.current_step, step)
    session.add(job)


def stale_jobs(session: Session, timeout_s: float, now: datetime | None = None) -> list[Job]:
    """Jobs a worker claimed (preflight/running) whose heartbeat stopped: their worker died."""
    cutoff = (now or utcnow()) - timedelta(seconds=timeout_s)
    active = [JobStatus.preflight.value, JobStatus.running.value]
    # A worker that died before its first heartbeat leaves heartbeat_at NULL: judge it by updated_at.
    heartbeat_at = col(Job.heartbeat_at)
    silent = or_(heartbeat_at < cutoff, and_(heartbeat_at.is_(None), col(Job.updated_at) < cutoff))
    return list(session.exec(select(Job).where(col(Job.status).in_(active), silent)).all())


# ---------------------------------------------------------------------------------------------- metrics


def add_metric_points(
    session: Session,
    job_id: int,
    points: Iterable[tuple[int, str, float]],
    logged_at: dict[int, datetime] | None = None,
) -> int:
    """Insert (step, name, value) points; a point already stored for (job, name, step) is kept, not duplicated.
    The job's `current_step` is raised to the batch's last step.
    `logged_at`: step -> when the run logged it (its metrics row's `ts`), else the time of this insert."""
    now = utcnow()
    when = logged_at or {}
    rows: list[dict[str, Any]] = [
        {"job_id": job_id, "step": s, "name": n, "value": float(v), "ts": when.get(s, now)} for s, n, v in points
    ]
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    unique = ["job_id", "name", "step"]
    stmt: Insert
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        stmt = postgresql.insert(MetricPoint).on_conflict_do_nothing(index_elements=unique)
    elif dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        stmt = sqlite.insert(MetricPoint).on_conflict_do_nothing(index_elements=unique)
    else:  # pragma: no cover
        raise RuntimeError(f"unsupported database {dialect}")
    names, steps = sorted({r["name"] for r in rows}), [r["step"] for r in rows]
    # Counted over the batch's names and step range only (index range scans): the whole job would be read
    # twice per batch otherwise, a cost growing with the run.
    counted = {"job_id": job_id, "names": names, "lo": min(steps), "hi": max(steps)}
    before = session.execute(_COUNT_RANGE, counted).scalar_one()
    # executemany (batched by the driver) rather than one VALUES list: no bind-parameter limit, and faster.
    for start in range(0, len(rows), METRIC_INSERT_CHUNK):
        session.execute(stmt, rows[start : start + METRIC_INSERT_CHUNK])
    rollups.refresh(session, job_id, names, min(steps), max(steps), grown=True)
    # In the same transaction: a reader never sees a metric row at a step the job's progress has not reached (the
    # heartbeat alone would lag it by up to its interval).
    session.execute(
        update(Job)
        .where(col(Job.id) == job_id, col(Job.current_step) < max(steps))
        .values(current_step=max(steps))
        .execution_options(synchronize_session=False)
    )
    return session.execute(_COUNT_RANGE, counted).scalar_one() - before


_COUNT_RANGE = text("""
SELECT COUNT(*) FROM metric_points WHERE job_id = :job_id AND name IN :names AND step >= :lo AND step <= :hi
""").bindparams(bindparam("names", expanding=True))


def delete_metrics_after(session: Session, job_id: int, step: int) -> int:
    """On resume from a checkpoint at `step`, later points will be produced again."""
    result = session.exec(delete(MetricPoint).where(col(MetricPoint.job_id) == job_id, col(MetricPoint.step) > step))
    rollups.truncate(session, job_id, step)
    return result.rowcount or 0


# The distinct names of a job's series by a loose index scan (one index probe per name) of
# uq_metric_job_name_step: SELECT DISTINCT would read every point of the job.
metric_names = rollups.metric_names  # the query lives with the rollups, which need it too


def count_metric_points(session: Session, job_id: int) -> int:
    return session.exec(select(func.count()).select_from(MetricPoint).where(MetricPoint.job_id == job_id)).one()


def delete_gate_reports(session: Session, version_ids: list[int]) -> None:
    """The quality-gate reports of dataset versions (deleted with them)."""
    if version_ids:
        session.exec(delete(GateReportRecord).where(col(GateReportRecord.dataset_version_id).in_(version_ids)))


# ---------------------------------------------------------------------------------------------- checkpoints


def upsert_checkpoint(session: Session, job_id: int, *, step: int, path: str, sha256: str, size_bytes: int) -> None:
    existing = session.exec(select(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.step == step)).first()
    if existing is None:
        session.add(Checkpoint(job_id=job_id, step=step, path=path, sha256=sha256, size_bytes=size_bytes))
    else:
        existing.path, existing.sha256, existing.size_bytes, existing.removed = path, sha256, size_bytes, False
        session.add(existing)


def mark_checkpoints_removed(session: Session, job_id: int, paths: Iterable[str]) -> None:
    paths = set(paths)
    for ckpt in session.exec(select(Checkpoint).where(Checkpoint.job_id == job_id)).all():
        if ckpt.path in paths and not ckpt.removed:
            ckpt.removed = True
            session.add(ckpt)


# ---------------------------------------------------------------------------------------------- row locks


def lock_job_row(session: Session, job_id: int) -> Job | None:
    """Lock the job's row for the rest of the transaction and return it freshly read.

    PostgreSQL: SELECT ... FOR UPDATE. SQLite: a no-op UPDATE as the transaction's first statement takes the
    database write lock (pysqlite starts the transaction lazily at the first write), so nothing changes the row
    between our read and our write."""
    if session.get_bind().dialect.name == "postgresql":
        return session.exec(
            select(Job).where(Job.id == job_id).with_for_update().execution_options(populate_existing=True)
        ).first()
    session.exec(
        update(Job)
        .where(col(Job.id) == job_id)
        .values(updated_at=Job.updated_at)
        .execution_options(synchronize_session=False)
    )
    return session.exec(select(Job).where(Job.id == job_id).execution_options(populate_existing=True)).first()


def lock_job_if_unchanged(session: Session, job: Job) -> bool:
    """Take the job's row for this transaction if its status is still the one we read (a no-op UPDATE: a row lock
    on PostgreSQL, the write lock on SQLite). Returns False, with `job` refreshed, when a worker changed it first;
    the caller then decides again on the fresh state."""
    result = session.exec(
        update(Job)
        .where(col(Job.id) == job.id, col(Job.status) == job.status)
        .values(updated_at=Job.updated_at)
        .execution_options(synchronize_session=False)
    )
    session.refresh(job)
    return (result.rowcount or 0) == 1
