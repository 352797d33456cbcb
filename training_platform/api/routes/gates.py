"""Quality gates (training_platform/data/gate/): profiles, gate runs on dataset versions, their reports, and the
admin override of a training job refused by its gate.

- `/gate-profiles`: everyone signed in lists and reads; admins create, replace and delete their own profiles. The
  built-ins (`default`, `strict`) and the operator's TP_GATE_PROFILES_FILE profiles are read-only here (409).
- `POST /datasets/{id}/versions/{v}/gate` queues a `gate` data job (202); the worker runs the profile's checks on
  the version's file and stores a gate report (every check's value, threshold and verdict, the version's sha256,
  the profile's hash). `GET .../gate-reports` lists them, newest first; `GET .../gate-reports/{rid}` is one report.
- `POST /jobs/{id}/gate-override {"reason"}` (admins): a training job whose `data.gate` failed may start anyway;
  recorded as a job event (and by the worker as `gate_override.json` in the run dir). A failed job is re-queued.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import BaseModel, Field, StringConstraints
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from training_platform.api import schemas
from training_platform.api.deps import AdminUser, CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, not_found
from training_platform.core.timeutil import utcnow
from training_platform.core.userpath import UserFile
from training_platform.data.gate import (
    CHECKS,
    MAX_EVAL_SETS,
    PROFILE_NAME_PATTERN,
    GateError,
    ProfileName,
    parse_profile,
)
from training_platform.db import crud
from training_platform.db.models import GateProfileRecord, GateReportRecord, JobEvent, JobStatus, row_id
from training_platform.services import gates as gate_service
from training_platform.services import jobs as job_service
from training_platform.services.access import reader_for

log = logging.getLogger("training_platform.api.gates")

router = APIRouter(tags=["gates"])

GATE_OVERRIDE_PREFIX = "gate override by "
MAX_REASON = 2000
ProfilePath = Annotated[
    str, Path(min_length=1, max_length=64, pattern=PROFILE_NAME_PATTERN, description="The profile's name.")
]


class ProfileRead(BaseModel):
    name: str
    description: str
    checks: dict[str, dict[str, Any]] = Field(description="Check -> its parameters and thresholds (all filled in).")
    hash: str = Field(description="sha256 of the profile's canonical JSON (name + checks).")
    source: str = Field(description="`builtin`, `file` (TP_GATE_PROFILES_FILE): read-only; `admin`: over this API.")


class ProfileBody(schemas.RequestBody):
    description: Annotated[str, StringConstraints(max_length=2000)] = ""
    checks: dict[Annotated[str, StringConstraints(min_length=1, max_length=64)], dict[str, Any]] = Field(
        min_length=1,
        max_length=64,
        description="Check name -> parameters (missing ones take their defaults). Checks: " + ", ".join(CHECKS) + ".",
    )


class ProfileCreate(ProfileBody):
    name: ProfileName


class GateRun(schemas.RequestBody):
    profile: ProfileName = "default"
    eval_sets: list[UserFile] = Field(
        default_factory=list,
        max_length=MAX_EVAL_SETS,
        description="Eval set files to test for leakage (path policy applies).",
    )
    reference: UserFile | None = Field(None, description="Reference set for the n-gram divergence check.")
    priority: schemas.Priority = 0


class GateReportItem(BaseModel):
    id: int
    dataset_version_id: int
    sha256: str
    profile_name: str
    profile_hash: str
    passed: bool
    job_id: int | None
    created_at: schemas.UtcDatetime
    failed: list[str]
    report: dict[str, Any] | None = None


class GateOverride(schemas.RequestBody):
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=MAX_REASON)] = Field(
        description="Why the job may start despite its failing quality gate (recorded in its events and run dir)."
    )


def _invalid(exc: GateError, prefix: str = "") -> ValidationFailed:
    return ValidationFailed([(f"{prefix}{loc}" if prefix else loc, msg) for loc, msg in exc.errors])


# ---------------------------------------------------------------------------------------------- profiles


def _profiles(session, user, settings) -> dict:
    try:
        return gate_service.all_profiles(session, settings)
    except GateError as exc:  # the operator's file is broken: say so (admins see why)
        log.error("gate profiles: %s", exc)
        raise conflict(
            str(exc) if user.is_admin else "the operator's gate profiles file is invalid; ask them to fix it"
        ) from None


@router.get("/gate-profiles", response_model=schemas.Page[ProfileRead])
def list_profiles(
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 200,
    offset: schemas.Offset = 0,
):
    profiles = _profiles(session, user, settings)
    items = [p.public(source) for p, source in profiles.values()]
    return {"items": items[offset : offset + limit], "total": len(items), "limit": limit, "offset": offset}


@router.get("/gate-profiles/{name}", response_model=ProfileRead, responses={404: {"model": schemas.ErrorOut}})
def get_profile(name: ProfilePath, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    profiles = _profiles(session, user, settings)
    if name not in profiles:
        raise not_found(f"gate profile {name!r}")
    profile, source = profiles[name]
    return profile.public(source)


def _read_only(session, settings, name: str) -> None:
    local = gate_service.file_profiles(settings)
    if name in local:
        where = "built in" if local[name][1] == "builtin" else "defined by the operator (TP_GATE_PROFILES_FILE)"
        raise conflict(f"gate profile {name!r} is {where}: read-only here")


@router.post(
    "/gate-profiles",
    status_code=status.HTTP_201_CREATED,
    response_model=ProfileRead,
    dependencies=[JsonBody],
    responses={403: {"model": schemas.ErrorOut}, 409: {"model": schemas.ErrorOut}, 422: {"model": schemas.ErrorOut}},
)
def create_profile(body: ProfileCreate, session: SessionDep, admin: AdminUser, settings: SettingsDep):
    """Admins only: a new profile; every check and parameter validated (422 with field paths)."""
    try:
        profile = parse_profile(body.name, {"description": body.description, "checks": body.checks})
    except GateError as exc:
        raise _invalid(exc) from None
    _read_only(session, settings, body.name)
    if session.exec(select(GateProfileRecord).where(GateProfileRecord.name == body.name)).first() is not None:
        raise conflict(f"a gate profile named {body.name!r} already exists")
    session.add(
        GateProfileRecord(
            name=profile.name,
            description=profile.description,
            checks=profile.checks,
            hash=profile.hash,
            created_by=admin.id,
        )
    )
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise conflict(f"a gate profile named {body.name!r} already exists") from None
    log.info("gate profile %r created by %s (hash %s)", profile.name, admin.name, profile.hash[:12])
    return profile.public("admin")


@router.put(
    "/gate-profiles/{name}",
    response_model=ProfileRead,
    dependencies=[JsonBody],
    responses={403: {"model": schemas.ErrorOut}, 404: {"model": schemas.ErrorOut}, 409: {"model": schemas.ErrorOut}},
)
def replace_profile(name: ProfilePath, body: ProfileBody, session: SessionDep, admin: AdminUser, settings: SettingsDep):
    """Admins only: replace an admin profile's checks (its hash changes: earlier reports no longer satisfy it)."""
    _read_only(session, settings, name)
    row = session.exec(select(GateProfileRecord).where(GateProfileRecord.name == name)).first()
    if row is None:
        raise not_found(f"gate profile {name!r}")
    try:
        profile = parse_profile(name, {"description": body.description, "checks": body.checks})
    except GateError as exc:
        raise _invalid(exc) from None
    row.description, row.checks, row.hash, row.updated_at = profile.description, profile.checks, profile.hash, utcnow()
    session.add(row)
    session.commit()
    log.info("gate profile %r replaced by %s (hash %s)", name, admin.name, profile.hash[:12])
    return profile.public("admin")


@router.delete(
    "/gate-profiles/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={403: {"model": schemas.ErrorOut}, 404: {"model": schemas.ErrorOut}, 409: {"model": schemas.ErrorOut}},
)
def delete_profile(name: ProfilePath, session: SessionDep, admin: AdminUser, settings: SettingsDep):
    _read_only(session, settings, name)
    row = session.exec(select(GateProfileRecord).where(GateProfileRecord.name == name)).first()
    if row is None:
        raise not_found(f"gate profile {name!r}")
    session.delete(row)
    session.commit()
    log.info("gate profile %r deleted by %s", name, admin.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# ---------------------------------------------------------------------------------------------- gate runs


def _version(session, user, dataset_id: int, version_id: int):
    from training_platform.api.routes.datasets import _version_of, _visible_dataset

    dataset = _visible_dataset(session, user, dataset_id)
    return dataset, _version_of(session, dataset, version_id)


@router.post(
    "/datasets/{dataset_id}/versions/{version_id}/gate",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses={404: {"model": schemas.ErrorOut}, 422: {"model": schemas.ErrorOut}},
)
def run_gate(
    dataset_id: schemas.DbId,
    version_id: schemas.DbId,
    body: GateRun,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
):
    """Queue a `gate` data job: the profile's checks on this version (against `eval_sets` for leakage and
    `reference` for divergence). The job's `config.result` names the stored report once it ran; a failing check
    does not fail the job (the report says which checks failed)."""
    from training_platform.api.routes.jobs import job_read, wake

    dataset, version = _version(session, user, dataset_id, version_id)
    errors: list[tuple[str, str]] = []
    try:
        gate_service.resolve_profile(session, settings, body.profile)
    except GateError as exc:
        errors += exc.errors
    errors += gate_service.check_inputs(body.eval_sets, body.reference, settings, reader_for(session, user))
    if errors:
        raise ValidationFailed(errors)
    config = {
        "operation": gate_service.GATE,
        "dataset_id": dataset.id,
        "version_id": version.id,
        "profile": body.profile,
        "eval_sets": body.eval_sets,
        "reference": body.reference,
    }
    job = crud.create_job(
        session,
        owner=user,
        name=f"gate {body.profile} {dataset.name} v{version.id}"[:200],
        config=config,
        priority=body.priority,
        kind="data",
    )
    job.algorithm = gate_service.GATE
    job.max_steps = 100
    session.add(job)
    session.commit()
    log.info(
        "gate job %s: profile %s on dataset %s version %s by %s",
        job.id,
        body.profile,
        dataset.id,
        version.id,
        user.name,
    )
    return job_read(session, job, user.name, warning=wake("data", body.priority, row_id(job)))


def _report_out(row: GateReportRecord, full: bool) -> dict:
    out = row.model_dump(exclude={"report"})
    out["failed"] = list(row.report.get("failed") or [])
    out["report"] = row.report if full else None
    return out


@router.get("/datasets/{dataset_id}/versions/{version_id}/gate-reports", response_model=schemas.Page[GateReportItem])
def list_gate_reports(
    dataset_id: schemas.DbId,
    version_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    profile: Annotated[str | None, Query(max_length=64)] = None,
    full: Annotated[bool, Query(description="Include each report's JSON.")] = False,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: schemas.Offset = 0,
):
    """The version's gate reports, newest first."""
    _, version = _version(session, user, dataset_id, version_id)
    conditions = [GateReportRecord.dataset_version_id == version.id]
    if profile:
        conditions.append(GateReportRecord.profile_name == profile)
    total = session.exec(select(func.count()).select_from(GateReportRecord).where(*conditions)).one()
    rows = session.exec(
        select(GateReportRecord)
        .where(*conditions)
        .order_by(col(GateReportRecord.id).desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return {"items": [_report_out(r, full) for r in rows], "total": total, "limit": limit, "offset": offset}


@router.get(
    "/datasets/{dataset_id}/versions/{version_id}/gate-reports/{report_id}",
    response_model=GateReportItem,
    responses={404: {"model": schemas.ErrorOut}},
)
def get_gate_report(
    dataset_id: schemas.DbId, version_id: schemas.DbId, report_id: schemas.DbId, session: SessionDep, user: CurrentUser
):
    _, version = _version(session, user, dataset_id, version_id)
    row = session.get(GateReportRecord, report_id)
    if row is None or row.dataset_version_id != version.id:
        raise not_found(f"gate report {report_id} of version {version.id}")
    return _report_out(row, True)


# ---------------------------------------------------------------------------------------------- override


@router.post(
    "/jobs/{job_id}/gate-override",
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses={403: {"model": schemas.ErrorOut}, 409: {"model": schemas.ErrorOut}},
)
def gate_override(admin: AdminUser, job_id: schemas.DbId, body: GateOverride, session: SessionDep):
    """Admins only: let a training job with `data.gate` start despite a failing quality gate. Recorded as a job
    event (who, why); a failed or cancelled job is re-queued, a queued one keeps its place."""
    from training_platform.api.deps import get_visible_job
    from training_platform.api.routes.jobs import job_read, wake

    job = get_visible_job(session, admin, job_id)
    gate = ((job.config or {}).get("data") or {}).get("gate") if isinstance(job.config, dict) else None
    if job.kind != "train" or not gate:
        raise conflict(f"job {job.id} has no quality gate (data.gate) to override")
    current = JobStatus(job.status)
    if current not in (JobStatus.failed, JobStatus.cancelled, JobStatus.queued):
        raise conflict(
            f"job {job.id} is {current.value}: only a queued, failed or cancelled job's gate can be overridden"
        )
    if not crud.lock_job_if_unchanged(session, job):
        raise conflict(f"job {job.id} changed state meanwhile (now {job.status}); try again")
    reason = f"{GATE_OVERRIDE_PREFIX}{admin.name}: {body.reason}"
    if current == JobStatus.queued:
        session.add(JobEvent(job_id=row_id(job), from_status=current.value, to_status=current.value, reason=reason))
        warning = None
    else:
        job_service.transition(session, job, JobStatus.queued, reason=reason + " (re-queued)")
        job.cancel_requested, job.error = False, None
        session.add(job)
    session.commit()
    if current != JobStatus.queued:
        warning = wake(job.kind, job.priority, row_id(job))
    log.warning("job %s: quality gate overridden by %s: %s", job.id, admin.name, body.reason)
    return job_read(session, job, warning=warning)
