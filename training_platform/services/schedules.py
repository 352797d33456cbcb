"""Auto-evaluation: firing the schedules stored in `eval_schedules`.

- cron schedules: Celery beat sends `fire_schedules` every TP_SCHEDULE_TICK seconds (queue `maintenance`); a
  schedule whose `next_fire_at` has passed fires once and gets its next time from the cron expression. Missed
  times (the platform was down) fire once, not once per missed time.
- on_new_checkpoint schedules: the training worker calls `fire_checkpoint_triggers(job_id)` right after it
  registered a new checkpoint of that job, and every tick calls it for all jobs (so a trigger lost to a crash still
  fires). A schedule with `every_n: N` fires on the job's N-th, 2N-th, ... checkpoint.

Where a firing runs: the request's `executor`; "auto" is decided per firing, as a submission's is, and also picks
the Ray executor for a checkpoint of a job trained on the cluster (`resources.launcher` ray) when the platform has
one (TP_RAY_ADDRESS); a cluster that does not answer then runs it locally (the job's `executor.reason` says so).

Each firing is claimed with a compare-and-set UPDATE (next_fire_at / last_checkpoint_step still what we read), so
two ticks or a tick and a worker never fire the same time or checkpoint twice. Firing creates an `eval` job (and
wakes an eval worker after the commit). A firing that cannot run (the model is gone, the checkpoint was rotated
away) is recorded in the schedule's `last_message`, and the schedule stays enabled.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from training_platform.core.settings import get_settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Checkpoint, EvalSchedule, Job, User
from training_platform.db.session import session_scope
from training_platform.evaluation.request import EvalRequest, RequestError, next_fire_time
from training_platform.services import evaluations as eval_service

log = logging.getLogger("training_platform.services.schedules")


def tick(now: datetime | None = None) -> dict[str, Any]:
    """One beat tick: due cron schedules, then checkpoint triggers of every watched job."""
    fired = fire_due_cron(now)
    fired += fire_checkpoint_triggers()
    return {"fired": fired}


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _claim(session: Session, schedule: EvalSchedule, column: Any, expected: Any, **values: Any) -> bool:
    """Compare-and-set: write `values` only if `column` still holds what we read, so two ticks (or a tick and a
    worker) never fire the same time or checkpoint twice. True when this caller won; the row is then re-read."""
    claimed = session.exec(
        update(EvalSchedule)
        .where(col(EvalSchedule.id) == schedule.id, col(column) == expected)
        .values(**values, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:
        return False
    session.refresh(schedule)
    return True


def fire_due_cron(now: datetime | None = None) -> list[int]:
    """Fire every enabled cron schedule that is due. Returns the eval job ids created."""
    now = now or utcnow()
    created: list[int] = []
    with session_scope() as session:
        due = session.exec(
            select(EvalSchedule.id, EvalSchedule.next_fire_at).where(
                EvalSchedule.enabled == True,  # noqa: E712 - SQL
                EvalSchedule.trigger == "cron",
                col(EvalSchedule.next_fire_at).is_not(None),
                col(EvalSchedule.next_fire_at) <= now,
            )
        ).all()
    for schedule_id, fire_at in due:
        assert fire_at is not None  # the query selected only schedules with a next_fire_at
        with session_scope() as session:
            schedule = session.get(EvalSchedule, schedule_id)
            if schedule is None or schedule.cron is None:
                continue
            following = next_fire_time(schedule.cron, max(_aware(now), _aware(fire_at)))
            if not _claim(
                session, schedule, EvalSchedule.next_fire_at, fire_at, next_fire_at=following, last_fired_at=now
            ):
                continue  # another tick fired it
            job_id = _fire(
                session,
                schedule,
                checkpoint=None,
                why=f"cron {schedule.cron!r} at {_aware(fire_at).isoformat(timespec='seconds')}",
            )
        if job_id is not None:
            created.append(job_id)
    _wake_all(created)
    return created


def fire_checkpoint_triggers(job_id: int | None = None) -> list[int]:
    """Fire on_new_checkpoint schedules for checkpoints registered since they last looked (of `job_id`, or of
    every watched job). Returns the eval job ids created."""
    created: list[int] = []
    with session_scope() as session:
        query = select(EvalSchedule.id).where(
            EvalSchedule.enabled == True,  # noqa: E712
            EvalSchedule.trigger == "on_new_checkpoint",
        )
        if job_id is not None:
            query = query.where(EvalSchedule.job_id == job_id)
        schedule_ids = list(session.exec(query).all())
    for schedule_id in schedule_ids:
        with session_scope() as session:
            schedule = session.get(EvalSchedule, schedule_id)
            if schedule is None or schedule.job_id is None:
                continue
            steps = list(
                session.exec(
                    select(Checkpoint.step).where(Checkpoint.job_id == schedule.job_id).order_by(col(Checkpoint.step))
                ).all()
            )
            new = [s for s in steps if s > schedule.last_checkpoint_step]
            if not new:
                continue
            seen = schedule.last_checkpoint_step
            if not _claim(session, schedule, EvalSchedule.last_checkpoint_step, seen, last_checkpoint_step=new[-1]):
                continue  # a tick or another worker took these checkpoints
            for step in new:
                ordinal = steps.index(step) + 1  # the job's n-th checkpoint
                if ordinal % max(1, schedule.every_n):
                    continue
                made = _fire(
                    session,
                    schedule,
                    checkpoint=step,
                    why=f"checkpoint #{ordinal} (step {step}) of job {schedule.job_id}",
                )
                if made is not None:
                    created.append(made)
    _wake_all(created)
    return created


def fire_now(session: Session, schedule: EvalSchedule) -> tuple[int | None, str]:
    """Fire a schedule once, now, on its model or its job's latest checkpoint (POST /schedules/{id}/run; the
    caller commits and wakes a worker). Returns (eval job id or None, the message recorded)."""
    job_id = _fire(session, schedule, checkpoint=None, why="run now", force=True)
    return job_id, schedule.last_message or ""


def _fire(
    session: Session, schedule: EvalSchedule, *, checkpoint: int | None, why: str, force: bool = False
) -> int | None:
    """Create the schedule's eval job (in `session`). Returns its id, or None when it cannot run (recorded)."""
    owner = session.get(User, schedule.owner_id)
    now = utcnow()
    try:
        if owner is None:
            raise RequestError([("owner", f"user {schedule.owner_id} no longer exists")])
        request = EvalRequest.model_validate(schedule.request)
        settings = get_settings()
        backend = str(request.backend.get("backend", "transformers"))
        if schedule.model is not None:
            target = eval_service.resolve_target(
                session, owner, model=schedule.model, job_id=None, checkpoint=None, backend=backend, settings=settings
            )
        else:
            target = eval_service.resolve_target(
                session,
                owner,
                model=None,
                job_id=schedule.job_id,
                checkpoint=checkpoint if checkpoint is not None else "latest",
                backend=backend,
                settings=settings,
            )
            if checkpoint is None and not force and _already_evaluated(session, schedule, target.checkpoint_step):
                schedule.last_message = (
                    f"{now.isoformat(timespec='seconds')}: {why}: skipped, step "
                    f"{target.checkpoint_step} of job {schedule.job_id} was already evaluated "
                    f"by this schedule"
                )
                session.add(schedule)
                return None
        config = eval_service.absolute_data_paths(request.to_config(target.model_path, name=schedule.name), settings)
        from training_platform.db.endpoints_crud import resolver

        problems = eval_service.check_endpoint(
            config, resolver(session, settings), job_id=None if schedule.model is not None else schedule.job_id
        )
        if problems:
            raise RequestError(problems)
        source = session.get(Job, target.source_job_id) if target.source_job_id is not None else None
        executor, problems = eval_service.resolve_executor(
            request, config, settings, launcher=eval_service.job_launcher(source), fall_back=True
        )
        if executor is None:
            raise RequestError(problems)
        job = eval_service.create_evaluation(
            session,
            owner=owner,
            name=f"{schedule.name}: {target.label}"[:200],
            config=config,
            target=target,
            priority=schedule.priority,
            schedule_id=schedule.id,
            keep_best_by=schedule.keep_best_by,
            request=schedule.request,
            executor=executor,
        )
    except (RequestError, ValueError) as exc:
        reason = "; ".join(f"{loc}: {msg}" for loc, msg in exc.errors) if isinstance(exc, RequestError) else str(exc)
        schedule.last_message = f"{now.isoformat(timespec='seconds')}: {why}: not run: {reason}"
        session.add(schedule)
        log.warning("schedule %s: %s", schedule.id, schedule.last_message)
        return None
    schedule.fired_count += 1
    schedule.last_fired_at = now
    where = f" on {executor.name}" if executor.name != "local" else ""
    schedule.last_message = f"{now.isoformat(timespec='seconds')}: {why}: evaluation {job.id} queued{where}"
    session.add(schedule)
    log.info("schedule %s fired (%s): eval job %s", schedule.id, why, job.id)
    return job.id


def _already_evaluated(session: Session, schedule: EvalSchedule, step: int | None) -> bool:
    from training_platform.db.models import Evaluation

    return (
        session.exec(
            select(Evaluation.job_id)
            .join(Job, col(Job.id) == Evaluation.job_id)
            .where(
                Evaluation.schedule_id == schedule.id,
                Evaluation.checkpoint_step == step,
                Evaluation.source_job_id == schedule.job_id,
                Job.status != "failed",
            )
        ).first()
        is not None
    )


def _wake_all(job_ids: list[int]) -> None:
    from training_platform.taskqueue.wake import wake_quietly

    for _ in job_ids:
        wake_quietly("eval", 0)
