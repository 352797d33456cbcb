"""Evaluation schedules: auto-evaluation on a cron expression (Celery beat) or on every N-th new checkpoint of a
training job. Firing creates an evaluation (GET /evaluations?schedule_id=N lists them); see services/schedules.py.
The request's `executor` is checked here when it is local or ray; "auto" is decided at each firing.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, Field
from sqlalchemy import func
from sqlmodel import Session, col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, not_found
from training_platform.core.settings import Settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Checkpoint, EvalSchedule, Job, User, row_id
from training_platform.evaluation.request import (
    EvalRequest,
    RequestError,
    next_fire_time,
    parse_cron,
    parse_metric_key,
    request_json_schema,
)
from training_platform.services import evaluations as eval_service
from training_platform.services.access import reader_for

log = logging.getLogger("training_platform.api.schedules")

router = APIRouter(prefix="/schedules", tags=["schedules"])

Trigger = Literal["cron", "on_new_checkpoint"]


class ScheduleCreate(EvalRequest):
    """`cron`: evaluate `model`, or the latest checkpoint of `job_id` (skipped when this schedule already evaluated
    that checkpoint), at every time the expression matches (UTC). `on_new_checkpoint`: evaluate every `every_n`-th
    checkpoint of training job `job_id` as it is saved."""

    name: schemas.JobName
    trigger: Trigger
    cron: str | None = Field(
        None, max_length=120, description='e.g. "0 3 * * *" (03:00 UTC daily); a 6th field is seconds.'
    )
    job_id: schemas.BodyId | None = None
    model: str | None = Field(None, max_length=4096)
    every_n: int = Field(1, ge=1, le=100_000, strict=True)
    include_existing: bool = Field(
        False, description="on_new_checkpoint: also evaluate the checkpoints the job already has."
    )
    keep_best_by: str | None = Field(
        None, max_length=130, description='e.g. "gsm8k/accuracy": keep and expose the job\'s best checkpoint by it.'
    )
    enabled: bool = True
    priority: schemas.Priority = 0


class ScheduleUpdate(schemas.RequestBody):
    name: schemas.JobName | None = None
    enabled: bool | None = None
    cron: str | None = Field(None, max_length=120)
    every_n: int | None = Field(None, ge=1, le=100_000, strict=True)
    keep_best_by: str | None = Field(None, max_length=130)
    priority: schemas.Priority | None = None


class ScheduleRead(BaseModel):
    id: int
    name: str
    owner: str
    enabled: bool
    trigger: str
    cron: str | None
    job_id: int | None
    model: str | None
    every_n: int
    keep_best_by: str | None
    priority: int
    request: dict[str, Any] = Field(description="benchmarks, generation, backend, sandbox, seed.")
    next_fire_at: schemas.UtcDatetime | None
    last_fired_at: schemas.UtcDatetime | None
    last_checkpoint_step: int
    fired_count: int
    last_message: str | None
    evaluations: int = Field(description="Evaluations this schedule created.")
    created_at: schemas.UtcDatetime
    updated_at: schemas.UtcDatetime


def _read(session: Session, schedule: EvalSchedule, owner_name: str | None = None) -> dict[str, Any]:
    from training_platform.db.models import Evaluation

    if owner_name is None:
        owner = session.get(User, schedule.owner_id)
        owner_name = owner.name if owner is not None else f"#{schedule.owner_id}"
    count = session.exec(
        select(func.count()).select_from(Evaluation).where(Evaluation.schedule_id == schedule.id)
    ).one()
    return {**schedule.model_dump(), "owner": owner_name, "evaluations": count}


def _visible(session: Session, user: User, schedule_id: int) -> EvalSchedule:
    schedule = session.get(EvalSchedule, schedule_id)
    if schedule is None or not (user.is_admin or schedule.owner_id == user.id):
        raise not_found(f"schedule {schedule_id}")
    return schedule


def _validate(session: Session, user: User, body: ScheduleCreate, settings: Settings) -> str | None:
    """Every problem of a new schedule as one 422. Returns the normalised cron expression."""
    errors: list[tuple[str, str]] = []
    cron = None
    if body.trigger == "cron":
        if body.cron is None:
            errors.append(("cron", 'a cron schedule needs `cron`, e.g. "0 3 * * *"'))
        else:
            try:
                cron = parse_cron(body.cron)
            except ValueError as exc:
                errors.append(("cron", str(exc)))
        if (body.model is None) == (body.job_id is None):
            errors.append(("model", "a cron schedule evaluates either `model` or the latest checkpoint of `job_id`"))
        if body.every_n != 1:
            errors.append(("every_n", "only for on_new_checkpoint schedules"))
    else:
        if body.cron is not None:
            errors.append(("cron", "only for cron schedules"))
        if body.job_id is None:
            errors.append(("job_id", "on_new_checkpoint watches a training job: give its id"))
        if body.model is not None:
            errors.append(("model", "on_new_checkpoint evaluates the job's checkpoints, not a model"))
    if body.job_id is not None:
        job = session.get(Job, body.job_id)
        if job is None or not (user.is_admin or job.owner_id == user.id):
            errors.append(("job_id", f"job {body.job_id} not found"))
        elif job.kind != "train":
            errors.append(("job_id", f"job {body.job_id} is a {job.kind} job; only training jobs have checkpoints"))
    backend = str(body.backend.get("backend", "transformers"))
    if body.model is not None and body.job_id is None:
        try:
            eval_service.resolve_target(
                session, user, model=body.model, job_id=None, checkpoint=None, backend=backend, settings=settings
            )
        except RequestError as exc:
            errors += exc.errors
    config, problems = eval_service.check_request(
        body,
        body.model or "<checkpoint>",
        settings,
        keep_best_by=body.keep_best_by,
        job_id=body.job_id,
        name=body.name,
        session=session,
        reader=reader_for(session, user),
    )
    errors += problems
    if config is not None and body.executor != "auto":  # auto is decided at each firing
        errors += eval_service.resolve_executor(body, config, settings)[1]
    if errors:
        raise ValidationFailed(errors)
    return cron


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ScheduleRead,
    dependencies=[JsonBody],
    responses={422: {"model": schemas.ErrorOut, "description": "Every problem with the request"}},
)
def create_schedule(body: ScheduleCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    cron = _validate(session, user, body, settings)
    now = utcnow()
    last_step = -1
    if body.trigger == "on_new_checkpoint" and not body.include_existing:
        last_step = session.exec(select(func.max(Checkpoint.step)).where(Checkpoint.job_id == body.job_id)).one()
        last_step = -1 if last_step is None else last_step
    schedule = EvalSchedule(
        owner_id=row_id(user),
        name=body.name,
        enabled=body.enabled,
        trigger=body.trigger,
        cron=cron,
        job_id=body.job_id,
        model=body.model,
        every_n=body.every_n,
        request=body.model_dump(mode="json", include=set(EvalRequest.model_fields)),
        keep_best_by=body.keep_best_by,
        priority=body.priority,
        next_fire_at=next_fire_time(cron, now) if cron else None,
        last_checkpoint_step=last_step,
    )
    session.add(schedule)
    session.commit()
    log.info("schedule %s (%s) created by %s", schedule.id, body.trigger, user.name)
    return _read(session, schedule, user.name)


@router.get("", response_model=schemas.Page[ScheduleRead])
def list_schedules(
    session: SessionDep,
    user: CurrentUser,
    job_id: Annotated[int | None, schemas.id_query()] = None,
    trigger: Annotated[Trigger | None, Query()] = None,
    enabled: Annotated[bool | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    conditions = []
    if not user.is_admin:
        conditions.append(EvalSchedule.owner_id == user.id)
    if job_id is not None:
        conditions.append(EvalSchedule.job_id == job_id)
    if trigger is not None:
        conditions.append(EvalSchedule.trigger == trigger)
    if enabled is not None:
        conditions.append(EvalSchedule.enabled == enabled)
    total = session.exec(select(func.count()).select_from(EvalSchedule).where(*conditions)).one()
    rows = session.exec(
        select(EvalSchedule).where(*conditions).order_by(col(EvalSchedule.id).desc()).limit(limit).offset(offset)
    ).all()
    return {"items": [_read(session, s) for s in rows], "total": total, "limit": limit, "offset": offset}


@lru_cache
def _schema() -> dict[str, Any]:
    return request_json_schema(ScheduleCreate)


@router.get("/schema")
def schedule_schema(user: CurrentUser) -> dict[str, Any]:
    """The JSON Schema of POST /schedules' body (the UI generates its form from it), benchmarks and generation
    defaults as in GET /evaluations/schema."""
    return _schema()


@router.get("/{schedule_id}", response_model=ScheduleRead)
def get_schedule(schedule_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    return _read(session, _visible(session, user, schedule_id))


@router.patch("/{schedule_id}", response_model=ScheduleRead, dependencies=[JsonBody])
def update_schedule(schedule_id: schemas.DbId, body: ScheduleUpdate, session: SessionDep, user: CurrentUser):
    """Enable/disable, rename, change the cron expression (next time recomputed), every_n, keep_best_by."""
    schedule = _visible(session, user, schedule_id)
    errors: list[tuple[str, str]] = []
    changes = body.model_dump(exclude_unset=True)
    if "cron" in changes:
        if schedule.trigger != "cron":
            errors.append(("cron", "only for cron schedules"))
        else:
            try:
                changes["cron"] = parse_cron(body.cron or "")
            except ValueError as exc:
                errors.append(("cron", str(exc)))
    if "every_n" in changes and schedule.trigger != "on_new_checkpoint":
        errors.append(("every_n", "only for on_new_checkpoint schedules"))
    if changes.get("keep_best_by") is not None:
        if schedule.job_id is None:
            errors.append(("keep_best_by", "keeps the best checkpoint of a training job: the schedule has no job"))
        else:
            try:
                request = EvalRequest.model_validate(schedule.request)
                parse_metric_key(changes["keep_best_by"], request.to_config("<checkpoint>"))
            except (ValueError, RequestError) as exc:
                errors.append(("keep_best_by", str(exc)))
    if (
        changes.get("enabled") is True
        and not schedule.enabled
        and schedule.job_id is not None
        and session.get(Job, schedule.job_id) is None
    ):
        errors.append(
            (
                "enabled",
                f"job {schedule.job_id} was deleted: this schedule cannot run again (create a new one for another job)",
            )
        )
    if errors:
        raise ValidationFailed(errors)
    re_enabled = changes.get("enabled") is True and not schedule.enabled
    for key, value in changes.items():
        setattr(schedule, key, value)
    now = utcnow()
    # Re-enabled: what happened while it was off does not fire in a burst now (missed times, checkpoints saved).
    if schedule.trigger == "cron" and ("cron" in changes or re_enabled):
        assert schedule.cron is not None  # a cron schedule always has its (parsed) expression
        schedule.next_fire_at = next_fire_time(schedule.cron, now)
    if schedule.trigger == "on_new_checkpoint" and re_enabled:
        latest = session.exec(select(func.max(Checkpoint.step)).where(Checkpoint.job_id == schedule.job_id)).one()
        schedule.last_checkpoint_step = max(schedule.last_checkpoint_step, -1 if latest is None else latest)
    schedule.updated_at = now
    session.add(schedule)
    session.commit()
    return _read(session, schedule)


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def delete_schedule(schedule_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """The schedule stops; the evaluations it created stay."""
    schedule = _visible(session, user, schedule_id)
    session.delete(schedule)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{schedule_id}/run", responses=errors.responses(409), status_code=status.HTTP_201_CREATED)
def run_schedule_now(schedule_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """Fire once now (cron: its model or the job's latest checkpoint; on_new_checkpoint: the latest checkpoint).
    Returns the evaluation's id."""
    from training_platform.api.routes.jobs import wake
    from training_platform.services.schedules import fire_now

    schedule = _visible(session, user, schedule_id)
    job_id, message = fire_now(session, schedule)
    if job_id is None:
        session.commit()  # the reason is kept in last_message
        raise conflict(f"schedule {schedule_id} did not fire: {message}")
    session.commit()
    return {"evaluation_id": job_id, "message": message, "warning": wake("eval", schedule.priority, job_id)}
