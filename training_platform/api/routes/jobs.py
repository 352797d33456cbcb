"""Jobs: submit, list, read, label (tags and note), cancel, retry, clone, delete, events.

The database is the queue of record: a submitted job is a `queued` row; the Celery message sent afterwards only
wakes a worker. If the broker is down the job still exists (201 with a `warning`) and the recovery sweep re-sends
the wake-up later.
"""

from __future__ import annotations

import copy
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Query, Response, status
from sqlalchemy import ColumnElement, Text, cast, delete, func, or_
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import Select

from training_platform.api import errors, schemas
from training_platform.api.deps import (
    CurrentUser,
    JsonBody,
    SessionDep,
    SettingsDep,
    VisibleJob,
)
from training_platform.api.errors import ValidationFailed, config_error, conflict, scrub
from training_platform.api.jobspec import apply_overrides, check_job_config
from training_platform.core.errors import FieldError
from training_platform.core.overrides import OverrideError
from training_platform.core.settings import Settings, get_settings
from training_platform.db import crud, runs_table
from training_platform.db.models import (
    TERMINAL,
    Checkpoint,
    Job,
    JobEvent,
    JobStatus,
    MetricPoint,
    RegisteredModel,
    User,
    row_id,
)
from training_platform.services import job_summaries, quotas, scheduler, usage
from training_platform.services import jobs as job_service
from training_platform.services.job_files import remove_job_files
from training_platform.training.config import ConfigError, JobConfig
from training_platform.training.engine_registry import engine_checks
from training_platform.training.launchers.status import distributed_info
from training_platform.training.rundir import RunDir

log = logging.getLogger("training_platform.api.jobs")

router = APIRouter(prefix="/jobs", tags=["jobs"])

WAKE_TIMEOUT_S = 5.0
_wake_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tp-wake")


# ---------------------------------------------------------------------------------------------- helpers


def job_read(session: Session, job: Job, owner_name: str | None = None, summary: dict | None = None, **extra) -> dict:
    """JobRead's fields (and `extra`). `summary`: the job's summary when the caller knows it (a new job's is
    empty), else read (job_summaries: a few queries)."""
    if owner_name is None:
        owner = session.get(User, job.owner_id)
        owner_name = owner.name if owner is not None else f"#{job.owner_id}"
    data = job.model_dump()
    data["owner"] = owner_name
    if summary is None:
        summary = job_summaries.summaries(session, [(row_id(job), job.best_checkpoint)])[row_id(job)]
    data["summary"] = summary
    data.update(extra)
    return data


def wake(kind: str, priority: int, job_id: int) -> str | None:
    """Send the wake-up message; on a broker problem return a warning instead of failing the request."""
    from training_platform.taskqueue.wake import wake_worker

    try:
        _wake_pool.submit(wake_worker, kind, priority).result(timeout=WAKE_TIMEOUT_S)
        return None
    except FutureTimeout:
        reason = f"no answer within {WAKE_TIMEOUT_S:.0f}s"
    except Exception as exc:  # noqa: BLE001 - any broker failure: the job is safe in the database
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    log.warning(
        "job %s is queued but no worker was woken (broker unreachable: %s); the recovery sweep will wake one",
        job_id,
        reason,
    )
    return f"broker unreachable ({reason}): the job is queued and will start when the recovery sweep wakes a worker"


def _validated_config(session: Session, raw, settings: Settings, user: User) -> dict:
    try:
        return check_job_config(session, raw, settings, user)
    except ConfigError as exc:
        raise config_error(exc) from None


def _submit(
    session: Session,
    user: User,
    *,
    name: str,
    config: dict,
    priority: int,
    cloned_from: int | None = None,
    tags: list[str] | None = None,
    note: str = "",
) -> dict:
    spec = {
        "name": name,
        "config": config,
        "priority": priority,
        "cloned_from": cloned_from,
        "tags": tags,
        "note": note,
    }
    return _submit_all(session, user, [spec])[0]


def _submit_all(session: Session, user: User, specs: list[dict]) -> list[dict]:
    """Create jobs (each spec: `crud.create_job` keyword arguments) and commit them in one transaction with
    whatever the caller added to the session (all or nothing), then wake one worker per job. After a broker
    failure the remaining jobs get the same warning without another attempt: the recovery sweep wakes workers.
    A user whose weekly device-hours are spent gets 403 (quota), nothing created."""
    quotas.check_submit(session, user, get_settings())
    created = [crud.create_job(session, owner=user, **spec) for spec in specs]
    session.commit()
    out, warning = [], None
    for job in created:
        log.info(
            "job %s submitted by %s (%s, priority %s%s%s)",
            job.id,
            user.name,
            job.algorithm,
            job.priority,
            f", clone of {job.cloned_from}" if job.cloned_from else "",
            f", sweep {job.sweep_id}" if job.sweep_id else "",
        )
        if warning is None:
            warning = wake(job.kind, job.priority, row_id(job))
        out.append(job_read(session, job, user.name, summary=job_summaries.empty_summary(), warning=warning))
    return out


# ---------------------------------------------------------------------------------------------- endpoints


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses={
        **errors.responses(403),
        422: {"model": schemas.ErrorOut, "description": "Every problem with the request/config"},
    },
)
def create_job(body: schemas.JobCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Submit a training job. The config is validated (schema, cross-field rules, path policy) before anything
    is stored; disk checks (files, rows, the model) run in the worker's preflight. `tags` and `note` label it in
    the runs table (PATCH /jobs/{id} changes them)."""
    config = _validated_config(session, body.config, settings, user)
    return _submit(session, user, name=body.name, config=config, priority=body.priority, tags=body.tags, note=body.note)


VALIDATE_MAX_ROWS = 1000  # rows of each dataset POST /jobs/validate reads (the worker's preflight reads them all)


def _loc(path: str) -> list[str | int]:
    """ "rewards[0].weight" -> ["rewards", 0, "weight"]; "<root>" -> []."""
    if path in ("", "<root>"):
        return []
    if path.startswith("verl.overrides."):  # the key of verl.overrides is itself a dotted verl key
        return ["verl", "overrides", path.removeprefix("verl.overrides.")]
    return [int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", path)]


def _config_warnings(cfg) -> list[str]:
    """What would run but probably not as meant, and what only a worker can check."""
    warnings = []
    t = cfg.training
    if t.max_steps is not None and t.save_steps and t.save_steps > t.max_steps:
        warnings.append(
            f"training.save_steps ({t.save_steps}) > training.max_steps ({t.max_steps}): no checkpoint "
            "before the end, so a failure or a stop cannot resume"
        )
    if t.eval_steps and not cfg.has_eval():
        warnings.append("training.eval_steps is set but there is no eval data: nothing will be evaluated")
    warnings.extend(engine_checks(cfg.engine).warnings(cfg))
    if cfg.rewards:
        from training_platform.training.rewards.weights import check_reward_weights

        warnings.extend(check_reward_weights(cfg.rewards, mode=t.reward_weights)[1])
    return warnings


def _gate_problems(session, settings, cfg, warnings: list[str]) -> list[FieldError]:
    """`data.gate`: a stored failing report for this content refuses the config now (the preflight would); with
    no stored report the gate runs in the job's preflight (a warning: the API never runs it)."""
    from training_platform.core.paths import resolve_data_path
    from training_platform.data.gate import GateError
    from training_platform.services import gates as gate_service

    try:
        verdict, why = gate_service.stored_verdict(
            session, settings, cfg.data.gate, resolve_data_path(cfg.data.train_file)
        )
    except GateError as exc:
        return [FieldError(loc, msg) for loc, msg in exc.errors]
    if verdict == "fail":
        return [FieldError("data.gate", why)]
    if verdict == "unknown":
        warnings.append(f"data.gate: {why}")
    return []


@router.post(
    "/validate",
    response_model=schemas.JobValidation,
    dependencies=[JsonBody],
    responses={422: {"model": schemas.ErrorOut, "description": "The body is not a job (e.g. no config)"}},
)
def validate_job(body: schemas.JobValidate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """What the job's preflight would say about this body, without creating anything: the schema, the cross-field
    rules, the path policy, the engine's own checks (verl: the generated verl config, our checks and verl's) and,
    once those pass, the files as the submitting user sees them: the datasets (their first 1,000
    rows each: the format the algorithm needs, bad rows, reward columns), the model and its
    tokenizer (context length, LoRA targets). 200 for a job body: `valid`, every problem at its field (`loc` as a
    list), warnings, and the effective config (every default filled in) whenever the config parses. Left to the
    worker's preflight: its devices, the rest of each dataset, running the quality gate (a stored failing report
    for the content refuses here: `data.gate`), judge probes, and a `trust_remote_code` model (its own code never
    runs in the API)."""
    from training_platform.training.config import effective_config, parse_config
    from training_platform.training.preflight import check_environment

    problems: list = []
    try:
        config = check_job_config(session, body.config, settings, user)
    except ConfigError as exc:
        problems.extend(exc.errors)
        config = body.config
    effective, warnings, memory = None, [], None
    try:
        cfg = parse_config(copy.deepcopy(config))
    except ConfigError:
        cfg = None
    if cfg is not None:
        effective = effective_config(cfg)
        warnings = _config_warnings(cfg)
        if not problems:
            problems.extend(engine_checks(cfg.engine).config_problems(cfg))
        if not problems:
            checked: dict = {}
            problems.extend(
                check_environment(
                    cfg, checked, dry_run=True, devices=False, max_rows=VALIDATE_MAX_ROWS, run_model_code=False
                )
            )
            memory = checked.get("memory")
            if "memory_warning" in checked:
                warnings.append(f"resources: {checked['memory_warning']}")
            if not problems and getattr(cfg.data, "gate", None) is not None:
                problems.extend(_gate_problems(session, settings, cfg, warnings))
            if cfg.model.trust_remote_code:
                warnings.append(
                    "model.trust_remote_code: the model and its tokenizer are checked when the job starts (their own "
                    "code never runs in the API)"
                )
    return {
        "valid": not problems,
        "effective_config": effective,
        "memory": memory,
        "warnings": warnings,
        "errors": [{"loc": _loc(e.path), "msg": scrub(e.reason)} for e in problems],
    }


@router.get("", response_model=schemas.Page[schemas.JobRead])
def list_jobs(
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    status_: Annotated[list[JobStatus] | None, Query(alias="status", description="Repeatable.")] = None,
    algorithm: Annotated[str | None, Query(max_length=32)] = None,
    engine: Annotated[str | None, Query(max_length=32, description="Training engine (trl, verl).")] = None,
    kind: Annotated[str | None, Query(max_length=16, description="train, data or eval.")] = None,
    q: Annotated[str | None, Query(max_length=200, description="Name contains (case-insensitive).")] = None,
    tag: Annotated[
        str | None,
        Query(max_length=schemas.MAX_TAG_LENGTH, description="Jobs with this tag (exact, case-sensitive)."),
    ] = None,
    owner: Annotated[
        str | None, Query(max_length=64, description="Owner name (admins; others see only theirs).")
    ] = None,
    sort: Annotated[schemas.JobSort, Query()] = "-created_at",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    conditions: list[ColumnElement[bool]] = []
    if not user.is_admin:
        conditions.append(col(Job.owner_id) == user.id)
    if status_:
        conditions.append(col(Job.status).in_([s.value for s in status_]))
    if algorithm:
        conditions.append(col(Job.algorithm) == algorithm)
    if kind:
        conditions.append(col(Job.kind) == kind)
    if engine:
        stored = Job.config["engine"].as_string()
        # A config without `engine` trains with the default one.
        default = JobConfig.model_fields["engine"].default
        conditions.append(or_(stored == engine, stored.is_(None)) if engine == default else stored == engine)
        conditions.append(col(Job.kind) == "train")
    if q:
        conditions.append(func.lower(Job.name).contains(q.lower(), autoescape=True))
    if tag is not None:
        problem = schemas.tag_problem(tag)
        if problem:
            raise ValidationFailed([("query.tag", problem)])
        conditions.append(runs_table.has_tag(session.get_bind().dialect.name, tag))
    if owner:
        conditions.append(col(User.name) == owner)

    orders: dict[str, list[ColumnElement[Any]]] = {
        "created_at": [col(Job.created_at).asc(), col(Job.id).asc()],
        "-created_at": [col(Job.created_at).desc(), col(Job.id).desc()],
        "priority": [col(Job.priority).asc(), col(Job.id).asc()],
        "-priority": [col(Job.priority).desc(), col(Job.id).asc()],
        "status": [col(Job.status).asc(), col(Job.id).desc()],
    }
    order = orders[sort]
    # The hottest read of the UI: one statement (the page and, by a window, the total), plain columns instead of
    # ORM objects, the JSON columns passed through as the stored text, and the page encoded once (orjson) without
    # re-validating it through JobRead: ~4x less CPU per request (docs/observability.md, bench/README.md).
    # tests/api/test_jobs_api.py checks every item against GET /jobs/{id}, which goes through JobRead. The summaries
    # of the page: one more statement for the metric points of all its jobs (+ two for the evaluations of those
    # without a best checkpoint), never one per job.
    # sqlmodel's select() is typed for at most four entities; for more it builds this same Select.
    query: Select[*tuple[Any, ...]] = (
        Select(*_LIST_COLUMNS, col(User.name).label("owner"), func.count().over().label("total"))
        .join(User, col(User.id) == Job.owner_id)
        .where(*conditions)
    )
    rows = session.execute(query.order_by(*order).limit(limit).offset(offset)).mappings().all()
    # Past the end (or nothing matches) the window has no row to report the total on.
    total = rows[0]["total"] if rows else session.exec(select(func.count()).select_from(query.subquery())).one()
    summaries = job_summaries.summaries(session, [(row["id"], _best_checkpoint(row)) for row in rows])
    items = []
    for row in rows:
        item = {name: row[name] for name in _LIST_PLAIN}
        item["owner"] = row["owner"]
        for name in _LIST_JSON:
            text = row[name]
            item[name] = None if text is None or text == "null" else orjson.Fragment(text)
        item["summary"] = summaries[row["id"]]
        item["queue"] = None
        items.append(item)
    waiting = [item["id"] for item in items if item["status"] == JobStatus.queued.value and item["kind"] == "train"]
    if waiting:
        for job_id, info in scheduler.queue_info(session, settings, waiting).items():
            next(item for item in items if item["id"] == job_id)["queue"] = info
    body = {"items": items, "total": total, "limit": limit, "offset": offset}
    return Response(orjson.dumps(body, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC), media_type="application/json")


def _best_checkpoint(row) -> dict | None:
    text = row["best_checkpoint"]
    if text is None or text == "null":
        return None
    value = orjson.loads(text)
    return value if isinstance(value, dict) else None


# JobRead's fields, read as columns by the listing: plain values, and JSON columns kept as their stored text
# (`owner` is the joined user's name, `summary` is computed).
_LIST_JSON = ("config", "preflight", "best_checkpoint", "tags")
_LIST_PLAIN = tuple(
    name
    for name in schemas.JobRead.model_fields
    if name not in _LIST_JSON and name not in ("owner", "summary", "queue")
)
_LIST_COLUMNS = [getattr(Job, name).label(name) for name in _LIST_PLAIN] + [
    cast(getattr(Job, name), Text).label(name) for name in _LIST_JSON
]


@router.get("/{job_id}", response_model=schemas.JobDetail)
def get_job(job: VisibleJob, session: SessionDep, settings: SettingsDep):
    """The job, and for training jobs its processes (launcher, nodes, world size, each rank's state), its place in
    the queue while it waits and its usage once it ran."""
    if job.kind != "train":
        return job_read(session, job)
    distributed = distributed_info(job.config, job.run_dir, job.status)
    queue = (
        scheduler.queue_info(session, settings, [row_id(job)]).get(row_id(job))
        if job.status == JobStatus.queued.value
        else None
    )
    return job_read(
        session, job, distributed=distributed, queue=queue, usage=usage.job_usage(session, row_id(job), settings)
    )


@router.patch("/{job_id}", response_model=schemas.JobRead, dependencies=[JsonBody])
def update_job(job: VisibleJob, body: schemas.JobUpdate, session: SessionDep, user: CurrentUser):
    """The job's tags and note (its owner or an admin; another user's job is 404). Only the fields sent change;
    nothing about how the job runs does, whatever its status."""
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    changed = runs_table.set_labels(session, job, tags=changes.get("tags"), note=changes.get("note"))
    if changed:
        session.commit()
        log.info("job %s: %s changed by %s", job.id, " and ".join(changed), user.name)
    return job_read(session, job)


@router.get("/{job_id}/events", response_model=list[schemas.JobEventRead])
def job_events(job: VisibleJob, session: SessionDep):
    return session.exec(select(JobEvent).where(JobEvent.job_id == job.id).order_by(col(JobEvent.id))).all()


@router.post("/{job_id}/cancel", responses=errors.responses(409), response_model=schemas.JobRead)
def cancel_job(job: VisibleJob, session: SessionDep, user: CurrentUser):
    """queued: cancelled at once. preflight/running: the worker is asked to stop (a checkpoint is saved after
    the current step) and marks the job cancelled. Finished jobs: 409."""
    for _ in range(3):  # re-decide if a worker changed the job between our read and our write
        current = JobStatus(job.status)
        if current in TERMINAL:
            raise conflict(f"job {job.id} is already {current.value}")
        if not crud.lock_job_if_unchanged(session, job):
            continue
        if current == JobStatus.queued:
            job_service.transition(session, job, JobStatus.cancelled, reason=f"cancelled by {user.name}")
        else:
            job.cancel_requested = True
            job.updated_at = crud.utcnow()
            session.add(job)
            session.add(
                JobEvent(
                    job_id=row_id(job),
                    from_status=current.value,
                    to_status=current.value,
                    reason=f"cancel requested by {user.name}",
                )
            )
        session.commit()
        if current != JobStatus.queued and job.run_dir:
            _touch_stop(job, job.run_dir)
        log.info("job %s: cancel by %s (was %s)", job.id, user.name, current.value)
        return job_read(session, job)
    raise conflict(f"job {job.id} is changing state; try again")


def _touch_stop(job: Job, run_dir: str) -> None:
    try:
        stop = RunDir(run_dir).stop_file
        if stop.parent.is_dir():
            stop.touch()
    except OSError as exc:
        log.warning("job %s: cannot write the STOP file: %s (the worker still sees cancel_requested)", job.id, exc)


@router.post("/{job_id}/retry", responses=errors.responses(403, 409), response_model=schemas.JobSubmitted)
def retry_job(job: VisibleJob, session: SessionDep, user: CurrentUser):
    """failed/cancelled -> queued. Attempts are kept; the worker resumes from the latest checkpoint. 403 when the
    owner's weekly device-hours are spent."""
    current = JobStatus(job.status)
    if current not in (JobStatus.failed, JobStatus.cancelled):
        raise conflict(f"only failed or cancelled jobs can be retried; job {job.id} is {current.value}")
    if job.kind == "train":
        owner = session.get(User, job.owner_id)
        if owner is not None:
            quotas.check_submit(session, owner, get_settings())
    if not crud.lock_job_if_unchanged(session, job):
        raise conflict(f"job {job.id} changed state meanwhile (now {job.status}); try again")
    job_service.transition(session, job, JobStatus.queued, reason=f"retry requested by {user.name}")
    job.cancel_requested = False
    job.error = None
    session.add(job)
    session.commit()
    if job.run_dir:  # a STOP file left from the cancel would stop the resumed run at once
        try:
            RunDir(job.run_dir).stop_file.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("job %s: cannot remove the STOP file: %s", job.id, exc)
    log.info("job %s: retry by %s", job.id, user.name)
    return job_read(session, job, warning=wake(job.kind, job.priority, row_id(job)))


@router.post(
    "/{job_id}/clone",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses=errors.responses(409),
)
def clone_job(
    job: VisibleJob,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    body: Annotated[schemas.JobClone | None, Body()] = None,
):
    """A new job from this job's config with `overrides` applied; validated like POST /jobs. The body is
    optional: without one the job is cloned as it is."""
    body = body or schemas.JobClone()
    if job.kind != "train":
        where = "POST /evaluations" if job.kind == "eval" else "POST /datasets/{id}/versions/{v}/operations"
        raise conflict(
            f"job {job.id} is a {job.kind} job; only training jobs can be cloned (submit again with {where})"
        )
    try:
        raw = apply_overrides(job.config, body.overrides)
    except OverrideError as exc:
        raise ValidationFailed([(f"overrides.{exc.key}" if exc.key else "overrides", exc.reason)]) from None
    config = _validated_config(session, raw, settings, user)
    name = body.name or f"{job.name} (clone)"[:200]
    priority = job.priority if body.priority is None else body.priority
    return _submit(session, user, name=name, config=config, priority=priority, cloned_from=job.id)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={
        204: {
            "description": "Deleted (see the retention rule above).",
            "headers": {
                "X-TP-Kept-Files": {
                    "schema": {"type": "string"},
                    "description": (
                        "Present when some of the job's files were kept under the retention rule: paths relative "
                        "to the data directory, `; `-separated, each with its reason in parentheses."
                    ),
                }
            },
        },
        **errors.responses(409),
    },
)
def delete_job(job: VisibleJob, session: SessionDep, settings: SettingsDep, user: CurrentUser):
    """Finished jobs only. Removes the job, its events, metric points and checkpoint rows (an evaluation: its
    results and the pin it holds on its checkpoint), and its files: `runs/job-N/`, `runs/job-N.attempt-*/`,
    `runs/job-N.{config.yaml,console.log,lock}`, an evaluation's `evals/job-N/`. Evaluation schedules on the job
    are disabled (their `last_message` says why). Job ids are never reused.

    Retention rule: a directory a registered model points into (e.g. a model registered from the job's
    `final/` or one of its checkpoints) is kept so the model keeps working; files outside the data directory or
    behind a symlink are never touched. What was kept is listed in the `X-TP-Kept-Files` response header."""
    if JobStatus(job.status) not in TERMINAL:
        raise conflict(f"job {job.id} is {job.status}; cancel it first (only finished jobs can be deleted)")
    if not crud.lock_job_if_unchanged(session, job):
        raise conflict(f"job {job.id} changed state meanwhile (now {job.status}); try again")
    from training_platform.services import evaluations as eval_service

    job_id, run_dir = row_id(job), job.run_dir
    if job.kind == "eval":  # its results go with it (leaderboard entries included); its checkpoint pin too
        eval_service.delete_evaluation_rows(session, job_id)
        eval_service.release_pin(job)
    eval_service.disable_schedules_of_job(session, job_id, f"job {job.id} was deleted by {user.name}")
    for model in (JobEvent, MetricPoint, Checkpoint):
        session.exec(delete(model).where(col(model.job_id) == job_id))
    session.delete(job)
    keep = _registered_model_dirs(session)
    session.commit()
    removal = remove_job_files(job_id, settings.data_path, run_dir=run_dir, keep=keep)
    log.info(
        "job %s deleted by %s; removed %s%s",
        job_id,
        user.name,
        ", ".join(removal.removed) or "no files",
        f"; kept {removal.kept}" if removal.kept else "",
    )
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    if removal.kept:
        kept = "; ".join(f"{path} ({why})" for path, why in removal.kept)
        response.headers["X-TP-Kept-Files"] = kept.encode("ascii", "backslashreplace").decode()[:4000]
    return response


def _registered_model_dirs(session: Session) -> dict[Path, str]:
    """{resolved directory: why it is kept} for every registered model (the retention rule of DELETE)."""
    out: dict[Path, str] = {}
    for name, path in session.exec(select(RegisteredModel.name, RegisteredModel.path)).all():
        try:
            out[Path(path).resolve()] = f"registered model {name!r} points here"
        except (OSError, ValueError):
            continue
    return out
