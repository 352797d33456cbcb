"""(Over 600 lines: one router per resource; the upload parser and the operations' logic already live elsewhere.)

Datasets as content-hashed versions: upload or register, list, versions with lineage, row preview, audit stats,
operations (queued as `data` jobs), delete.

Every upload, registration and operation creates an immutable version named by the sha256 of its file. The API
never parses uploaded data: an upload is streamed to a staging file chunk by chunk (at most `TP_MAX_UPLOAD_MB`,
default 512 MB; 413 beyond, nothing kept) and answered 202 with its dataset and an `ingest` data job; the worker
validates it row by row under the caps of docs/limits.md, computes its statistics and stores the version (the job's
`config.result` then names it). Policy `reject` refuses the whole file on any bad row (the job fails; its
`config.result.detail` lists the `line N: field` problems; nothing stored), policy `quarantine` stores the good rows
and keeps the bad ones aside (listed in the report).
A version's `path` is relative to TP_DATA_DIR: use it as `data.train_file` in a job config (the run's manifest then
records the same sha256).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, StringConstraints, field_validator
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, forbidden, not_found
from training_platform.api.multipart import UPLOAD_OPENAPI, read_upload
from training_platform.core.path_policy import check_path, resolve_path, shown
from training_platform.core.settings import Settings
from training_platform.db import crud
from training_platform.db.models import TERMINAL, Dataset, DatasetVersionRecord, Job, User, row_id
from training_platform.services import dataset_operations
from training_platform.services import datasets as dataset_service
from training_platform.services.access import dataset_visible, dataset_visible_clause, reader_for

log = logging.getLogger("training_platform.api.datasets")

router = APIRouter(prefix="/datasets", tags=["datasets"])

DatasetName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128, pattern=schemas.NAME_PATTERN)
]
Policy = Literal["reject", "quarantine"]
SEARCH_SCAN_ROWS = 200_000  # rows a `q` search of the row preview reads at most (the API reads bounded amounts)


# ---------------------------------------------------------------------------------------------- models


class CurrentVersion(BaseModel):
    id: int
    sha256: str
    format: str | None
    rows: int
    size_bytes: int
    operation: str
    created_at: schemas.UtcDatetime


class DatasetRead(BaseModel):
    id: int
    name: str
    owner: str
    description: str
    shared: bool = Field(
        False, description="Readable (and usable in jobs) by every user; set by the owner or an admin with PATCH."
    )
    current_version_id: int | None
    current_version: CurrentVersion | None = Field(None, description="The latest version at a glance.")
    version_count: int
    created_at: schemas.UtcDatetime
    updated_at: schemas.UtcDatetime


class VersionRead(BaseModel):
    id: int
    dataset_id: int
    sha256: str
    path: str = Field(description="Relative to TP_DATA_DIR: usable as `data.train_file` in a job config.")
    format: str | None
    rows: int
    size_bytes: int
    row_schema: dict[str, Any] = Field(serialization_alias="schema", description="Field -> JSON type(s).")
    stats: dict[str, Any]
    parent_version_id: int | None
    operation: str
    recipe: dict[str, Any] | None
    job_id: int | None
    created_at: schemas.UtcDatetime


class LineageItem(BaseModel):
    id: int
    sha256: str
    operation: str
    recipe: dict[str, Any] | None
    job_id: int | None
    parent_version_id: int | None
    rows: int
    created_at: schemas.UtcDatetime


class VersionDetail(VersionRead):
    report: dict[str, Any] | None
    lineage: list[LineageItem] = Field(description="Ancestors, nearest first, up to the root upload/register.")
    audit_cached: bool


class IngestQueued(BaseModel):
    dataset: DatasetRead = Field(description="The dataset the file goes to (created by this request if new).")
    job: schemas.JobSubmitted = Field(
        description=(
            "The `ingest` data job that validates and stores the file: follow it at /jobs/{id}. Once succeeded, its "
            "`config.result` holds `version_id` and `created` (false: the dataset already had this content); once "
            "failed, `config.result.detail` lists the problems (`line N: field`), and nothing was stored."
        )
    )
    staged_bytes: int = Field(description="Bytes received and staged for the worker.")


class RegisterBody(schemas.RequestBody):
    name: DatasetName
    path: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4096)] = Field(
        description="A file on the server, inside the allowed directories (relative paths: under TP_DATA_DIR)."
    )
    format: str | None = None
    policy: Policy = "reject"
    description: Annotated[str, StringConstraints(max_length=2000)] = ""


class DatasetUpdate(schemas.RequestBody):
    shared: bool | None = Field(
        None,
        description="Share the dataset with every user (read and use; only the owner and admins change or delete it).",
    )
    description: Annotated[str, StringConstraints(max_length=2000)] | None = None


class OperationCreate(schemas.RequestBody):
    operation: str = Field(
        max_length=64,
        description="A registered operation (GET /datasets/operations lists them with their params' schemas).",
        json_schema_extra=lambda schema: schema.update(enum=[*dataset_operations.operation_names()]),
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The operation's parameters (its `params_schema` in GET /datasets/operations).",
    )
    name: schemas.JobName | None = None
    priority: schemas.Priority = 0
    executor: Literal["auto", "local", "ray"] = Field(
        "auto",
        description="Where it runs: local (the data worker), ray (Ray Data on the platform's cluster, TP_RAY_ADDRESS; "
        "clean and dedup) or auto (ray when there is a cluster and the version has more than TP_RAY_MIN_ROWS rows).",
    )

    @field_validator("operation")
    @classmethod
    def _registered(cls, operation: str) -> str:
        if operation not in dataset_operations.operation_names():
            raise ValueError(dataset_operations.unknown_operation(operation))
        return operation


class RowItem(BaseModel):
    index: int = Field(description="0-based row index.")
    line: int = Field(description="1-based line (JSONL) or record number.")
    row: Any


class RowsPage(BaseModel):
    items: list[RowItem]
    total: int = Field(description="Rows matching `q` (all rows without `q`).")
    limit: int
    offset: int
    q: str | None
    complete: bool = Field(
        True,
        description=f"False: a search stopped after scanning {SEARCH_SCAN_ROWS} rows; "
        f"`total` counts the matches among them.",
    )


# ---------------------------------------------------------------------------------------------- helpers


def _visible_dataset(session: Session, user: User, dataset_id: int) -> Dataset:
    """The dataset if this user may see it (own, shared, or admin); another user's unshared dataset is 404."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or not dataset_visible(user, dataset):
        raise not_found(f"dataset {dataset_id}")
    return dataset


def _owned_dataset(session: Session, user: User, dataset_id: int, action: str) -> Dataset:
    """The dataset if this user may change it (owner or admin): 404 when invisible, 403 when only shared."""
    dataset = _visible_dataset(session, user, dataset_id)
    if not user.is_admin and dataset.owner_id != user.id:
        raise forbidden(f"only the owner of dataset {dataset_id} or an admin can {action} it")
    return dataset


def _version_of(session: Session, dataset: Dataset, version_id: int) -> DatasetVersionRecord:
    version = session.get(DatasetVersionRecord, version_id)
    if version is None or version.dataset_id != dataset.id:
        raise not_found(f"version {version_id} of dataset {dataset.id}")
    return version


def _dataset_out(session: Session, dataset: Dataset, owner_name: str | None = None, count: int | None = None) -> dict:
    if owner_name is None:
        owner = session.get(User, dataset.owner_id)
        owner_name = owner.name if owner is not None else f"#{dataset.owner_id}"
    if count is None:
        count = session.exec(
            select(func.count()).select_from(DatasetVersionRecord).where(DatasetVersionRecord.dataset_id == dataset.id)
        ).one()
    current = session.get(DatasetVersionRecord, dataset.current_version_id) if dataset.current_version_id else None
    current_out = current.model_dump(include=set(CurrentVersion.model_fields)) if current is not None else None
    return {**dataset.model_dump(), "owner": owner_name, "version_count": count, "current_version": current_out}


def _version_out(version: DatasetVersionRecord) -> dict:
    return version.model_dump(exclude={"report", "audit"})


def _version_detail(session: Session, version: DatasetVersionRecord) -> dict:
    return {
        **version.model_dump(exclude={"audit"}),
        "audit_cached": version.audit is not None,
        "lineage": [
            v.model_dump(include=set(LineageItem.model_fields)) for v in dataset_service.lineage(session, version)
        ],
    }


def _queue_ingest(
    session: Session,
    user: User,
    staged: Path,
    settings: Settings,
    *,
    name: str,
    suffix: str,
    fmt: str | None,
    policy: str,
    description: str,
    kind: str,
    recipe: dict,
    source: str,
) -> dict:
    """The dataset (created if new) and an `ingest` data job for a staged file (the worker removes the file when it
    is done with it). The response body."""
    from training_platform.api.routes.jobs import job_read, wake

    for attempt in range(2):
        try:
            dataset, _ = dataset_service.get_or_create_dataset(session, user, name, description)
            session.commit()
            break
        except IntegrityError:  # a concurrent request created the same dataset first
            session.rollback()
            if attempt:
                raise conflict(f"dataset {name!r} was changed by a concurrent request; try again") from None
    size = staged.stat().st_size
    config = {
        "operation": dataset_service.INGEST,
        "kind": kind,
        "dataset_id": dataset.id,
        "staged": str(staged.relative_to(settings.data_path)),
        "suffix": suffix,
        "format": fmt,
        "policy": policy,
        "source": source,
        "recipe": recipe,
        "size_bytes": size,
    }
    job = crud.create_job(session, owner=user, name=f"{kind} {name}"[:200], config=config, kind="data")
    job.algorithm = dataset_service.INGEST
    job.max_steps = 100  # progress in percent
    session.add(job)
    session.commit()
    log.info(
        "dataset %s (%s): %s of %s bytes staged by %s; ingest job %s", dataset.id, name, kind, size, user.name, job.id
    )
    return {
        "dataset": _dataset_out(session, dataset, user.name),
        "job": job_read(session, job, user.name, warning=wake("data", job.priority, row_id(job))),
        "staged_bytes": size,
    }


# ---------------------------------------------------------------------------------------------- endpoints


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestQueued,
    openapi_extra=UPLOAD_OPENAPI,
    responses={
        **errors.responses(400, 409, 415),
        413: {"model": schemas.ErrorOut, "description": "Larger than TP_MAX_UPLOAD_MB"},
        422: {"model": schemas.ErrorOut, "description": "Bad form fields"},
    },
)
async def upload_dataset(request: Request, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Upload a dataset file (multipart: `file`, `name`, optional `format`, `policy` reject|quarantine,
    `description`). The file is streamed to a staging file (at most TP_MAX_UPLOAD_MB; memory stays flat) and
    answered 202 with the dataset (created on first use) and the `ingest` data job that validates and stores it in
    a worker: every distinct content becomes a version named by its sha256; content the dataset already has maps to
    that version. Follow the job: see `IngestQueued.job`."""
    session.commit()  # authenticated: give the connection back while the body streams in (objects stay loaded)
    form, values = await read_upload(request, settings)
    assert form.path is not None and form.suffix is not None and form.filename is not None  # read_upload checked
    recipe = {"filename": form.filename, "policy": values["policy"], "format": values["fmt"] or "auto"}
    try:
        return await run_in_threadpool(
            _queue_ingest,
            session,
            user,
            form.path,
            settings,
            name=values["name"],
            suffix=form.suffix,
            fmt=values["fmt"],
            policy=values["policy"],
            description=values["description"],
            kind="upload",
            recipe=recipe,
            source=form.filename,
        )
    except BaseException:
        form.discard()
        raise


@router.post(
    "/register",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestQueued,
    dependencies=[JsonBody],
    responses={**errors.responses(409), 422: {"model": schemas.ErrorOut, "description": "Path policy or fields"}},
)
def register_dataset(body: RegisterBody, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Register a file already on the server (inside the allowed directories). It is copied into the staging area
    (so the version stays immutable whatever happens to the original) and ingested like an upload by a data job:
    202 with the dataset and the job."""
    from training_platform.data.formats import DATA_FORMATS

    errors: list[tuple[str, str]] = []
    problem = check_path("path", body.path, settings, reader_for(session, user))
    if problem is not None:
        errors.append((problem.path, problem.reason))
    fmt = None if body.format in (None, "", "auto") else body.format
    if fmt is not None and fmt not in DATA_FORMATS:
        errors.append(("format", f"unknown format {fmt!r}; use auto or one of {', '.join(DATA_FORMATS)}"))
    if errors:
        raise ValidationFailed(errors)
    source = resolve_path(body.path, settings)
    if not source.is_file():
        raise ValidationFailed([("path", f"no such file: {body.path}")])
    try:
        suffix = dataset_service.normalize_suffix(source.name)
    except ValueError as exc:
        raise ValidationFailed([("path", str(exc))]) from None
    limit = int(settings.max_dataset_expanded_mb * 2**20)
    if source.stat().st_size > limit:
        raise ValidationFailed(
            [
                (
                    "path",
                    f"the file is larger than the limit of {settings.max_dataset_expanded_mb:g} "
                    f"MB per dataset file (TP_MAX_DATASET_EXPANDED_MB)",
                )
            ]
        )
    staged = dataset_service.new_staging_path(settings, suffix)
    try:
        shutil.copyfile(source, staged)  # a snapshot: the original may change after this
        recipe = {
            "source": body.path,
            "resolved": shown(source, settings),
            "policy": body.policy,
            "format": fmt or "auto",
        }
        return _queue_ingest(
            session,
            user,
            staged,
            settings,
            name=body.name,
            suffix=suffix,
            fmt=fmt,
            policy=body.policy,
            description=body.description,
            kind="register",
            recipe=recipe,
            source=shown(source, settings),
        )
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


@router.get("", response_model=schemas.Page[DatasetRead])
def list_datasets(
    session: SessionDep,
    user: CurrentUser,
    q: Annotated[str | None, Query(max_length=200, description="Name contains (case-insensitive).")] = None,
    owner: Annotated[
        str | None, Query(max_length=64, description="Owner name (admins; others see only theirs).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    conditions = []
    if not user.is_admin:
        conditions.append(dataset_visible_clause(user))
    if q:
        conditions.append(func.lower(Dataset.name).contains(q.lower(), autoescape=True))
    if owner:
        conditions.append(User.name == owner)
    counts = (
        select(DatasetVersionRecord.dataset_id, func.count().label("n"))
        .group_by(col(DatasetVersionRecord.dataset_id))
        .subquery()
    )
    base = (
        select(Dataset, User.name, func.coalesce(counts.c.n, 0))
        .join(User, col(User.id) == Dataset.owner_id)
        .join(counts, counts.c.dataset_id == Dataset.id, isouter=True)
        .where(*conditions)
    )
    total = session.exec(select(func.count()).select_from(base.subquery())).one()
    rows = session.exec(
        base.order_by(col(Dataset.updated_at).desc(), col(Dataset.id).desc()).limit(limit).offset(offset)
    ).all()
    return {
        "items": [_dataset_out(session, d, owner_name, n) for d, owner_name, n in rows],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


@router.get("/operations")
def list_operations(user: CurrentUser) -> dict[str, Any]:
    """The operations `POST /datasets/{id}/versions/{v}/operations` runs (the data factory's registry), each with
    its description, the JSON Schema of its `params` (defaults included) and example params (`example_by_format`:
    for an input version of that format)."""
    return dataset_operations.describe_operations()


@router.get("/{dataset_id}", response_model=DatasetRead)
def get_dataset(dataset_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    return _dataset_out(session, _visible_dataset(session, user, dataset_id))


@router.patch(
    "/{dataset_id}",
    response_model=DatasetRead,
    dependencies=[JsonBody],
    responses={
        403: {"model": schemas.ErrorOut, "description": "A shared dataset of another user"},
        404: {"model": schemas.ErrorOut, "description": "No such dataset, or another user's"},
    },
)
def update_dataset(dataset_id: schemas.DbId, body: DatasetUpdate, session: SessionDep, user: CurrentUser):
    """Owner or admin: share the dataset with every user (`{"shared": true}`), or change its description."""
    dataset = _owned_dataset(session, user, dataset_id, "change")
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    for key, value in changes.items():
        setattr(dataset, key, value)
    if changes:
        dataset.updated_at = crud.utcnow()
        session.add(dataset)
        session.commit()
        log.info("dataset %s (%s) updated by %s: %s", dataset.id, dataset.name, user.name, changes)
    return _dataset_out(session, dataset)


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={409: {"model": schemas.ErrorOut, "description": "A job still references a version"}},
)
def delete_dataset(dataset_id: schemas.DbId, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Delete a dataset that no job references: its versions' rows and content files (content another dataset
    shares is kept), its quarantine files and reports. 409 while any job config names one of its version files
    (e.g. a training job's `data.train_file`; delete that job first) or a data job is still working on it."""
    dataset = _owned_dataset(session, user, dataset_id, "delete")
    refs = dataset_service.referencing_jobs(session, dataset, settings)
    if refs:
        from training_platform.db.models import Job

        owners = dict(session.exec(select(Job.id, Job.owner_id).where(col(Job.id).in_([j for j, _ in refs]))).all())
        mine = [why for job_id, why in refs if user.is_admin or owners.get(job_id) == user.id]
        others = len(refs) - len(mine)  # a shared dataset: other users' jobs are counted, never named
        listed = "; ".join(mine[:10] + ([f"{others} job(s) of other users"] if others else []))
        raise conflict(f"dataset {dataset_id} is in use by {len(refs)} job(s): {listed}")
    files = dataset_service.delete_dataset(session, dataset, settings)
    session.commit()
    dataset_service.remove_files(files, settings)
    log.info("dataset %s (%s) deleted by %s", dataset_id, dataset.name, user.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{dataset_id}/versions", response_model=schemas.Page[VersionRead])
def list_versions(
    dataset_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    job_id: Annotated[int | None, schemas.id_query("Only the version this data job produced.")] = None,
    operation: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    dataset = _visible_dataset(session, user, dataset_id)
    conditions = [DatasetVersionRecord.dataset_id == dataset.id]
    if job_id is not None:
        conditions.append(DatasetVersionRecord.job_id == job_id)
    if operation:
        conditions.append(DatasetVersionRecord.operation == operation)
    base = select(DatasetVersionRecord).where(*conditions)
    total = session.exec(select(func.count()).select_from(base.subquery())).one()
    rows = session.exec(base.order_by(col(DatasetVersionRecord.id).asc()).limit(limit).offset(offset)).all()
    return {"items": [_version_out(v) for v in rows], "total": total, "limit": limit, "offset": offset}


@router.get("/{dataset_id}/versions/{version_id}", responses=errors.responses(410), response_model=VersionDetail)
def get_version(dataset_id: schemas.DbId, version_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """The version with its report and its lineage (ancestors up to the root, each with operation + recipe)."""
    dataset = _visible_dataset(session, user, dataset_id)
    return _version_detail(session, _version_of(session, dataset, version_id))


def _stored_file(version: DatasetVersionRecord, settings: Settings) -> Path:
    path = dataset_service.absolute(version.path, settings)
    if not path.is_file():
        raise HTTPException(
            status.HTTP_410_GONE,
            detail=f"the file of version {version.id} is missing from the content store ({version.path})",
        )
    return path


def _plain(row: Any) -> Any:
    try:
        json.dumps(row)
        return row
    except (TypeError, ValueError):
        return json.loads(json.dumps(row, default=str))


@router.get("/{dataset_id}/versions/{version_id}/rows", responses=errors.responses(410), response_model=RowsPage)
def version_rows(
    dataset_id: schemas.DbId,
    version_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    offset: schemas.Offset = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    q: Annotated[str | None, Query(max_length=200, description="Case-insensitive substring of the row's JSON.")] = None,
):
    """A page of rows, streamed from the file (never loaded whole: at most `offset + limit` rows are read, each
    under the TP_MAX_ROW_MB cap). With `q`, only rows whose JSON text contains it (case-insensitive); `total`
    counts the matches, among the first rows only when `complete` is false."""
    from training_platform.data.io import iter_records

    dataset = _visible_dataset(session, user, dataset_id)
    version = _version_of(session, dataset, version_id)
    path = _stored_file(version, settings)
    needle = q.casefold() if q else None
    items: list[dict] = []
    matched = 0
    complete = True
    for scanned, record in enumerate(iter_records(path, dataset_service.read_limits(settings))):
        if scanned >= SEARCH_SCAN_ROWS:
            complete = False
            break
        row = record.row if record.error is None else {"error": str(record.error), "raw": record.raw}
        if needle is not None:
            text = json.dumps(row, ensure_ascii=False, default=str).casefold()
            if needle not in text:
                continue
        if matched >= offset and len(items) < limit:
            items.append({"index": record.index, "line": record.line, "row": _plain(row)})
        matched += 1
        if needle is None and len(items) >= limit:
            break
    total = matched if needle is not None else version.rows
    return {"items": items, "total": total, "limit": limit, "offset": offset, "q": q, "complete": complete}


@router.get(
    "/{dataset_id}/versions/{version_id}/stats",
    response_model=dict[str, Any],
    responses={
        202: {
            "model": schemas.JobSubmitted,
            "description": "Not computed yet (or `refresh`): the `audit` data job computing it",
        },
        422: {"model": schemas.ErrorOut, "description": "The audit of this version failed"},
    },
)
def version_stats(
    dataset_id: schemas.DbId,
    version_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    refresh: Annotated[bool, Query(description="Recompute (queues an audit data job).")] = False,
) -> dict[str, Any] | JSONResponse:
    """The audit report of the version (length/turn distributions, distinct-n, difficulty buckets, duplicates).
    Workers compute it when they store a version (never the API); for a version without one, or with `refresh`,
    this answers 202 with the `audit` data job computing it (the one already queued, if any)."""
    from training_platform.api.routes.jobs import job_read, wake

    dataset = _visible_dataset(session, user, dataset_id)
    version = _version_of(session, dataset, version_id)
    if version.audit is not None and not refresh:
        if "error" in version.audit:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                detail=f"cannot audit version {version.id}: {version.audit['error']}",
            )
        return {"version_id": version.id, "sha256": version.sha256, "cached": True, **version.audit}
    active = session.exec(
        select(Job).where(
            Job.kind == "data",
            Job.algorithm == dataset_service.AUDIT,
            col(Job.status).not_in([s.value for s in TERMINAL]),
        )
    ).all()
    job = next((j for j in active if j.config.get("version_id") == version.id), None)
    warning = None
    if job is None:
        config = {"operation": dataset_service.AUDIT, "dataset_id": dataset.id, "version_id": version.id}
        job = crud.create_job(
            session, owner=user, name=f"audit {dataset.name} v{version.id}"[:200], config=config, kind="data"
        )
        job.algorithm = dataset_service.AUDIT
        job.max_steps = 100
        session.add(job)
        session.commit()
        warning = wake("data", job.priority, row_id(job))
    body = schemas.JobSubmitted.model_validate(job_read(session, job, warning=warning)).model_dump(mode="json")
    return JSONResponse(body, status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/{dataset_id}/versions/{version_id}/operations",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses={422: {"model": schemas.ErrorOut, "description": "Every problem with the parameters"}},
)
def create_operation(
    dataset_id: schemas.DbId,
    version_id: schemas.DbId,
    body: OperationCreate,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
):
    """Queue an operation on a version as a `data` job (listed, cancelled and retried under /jobs like training
    jobs). The parameters are checked now (422 with field paths); the worker stores the result as a new version
    whose parent is this one (`GET /datasets/{id}/versions?job_id=<job>` finds it)."""
    from training_platform.api.routes.jobs import job_read, wake

    dataset = _owned_dataset(session, user, dataset_id, "add versions to")
    version = _version_of(session, dataset, version_id)
    try:
        job = dataset_operations.queue_operation(
            session,
            user,
            dataset,
            version,
            body.operation,
            body.params,
            settings,
            reader=reader_for(session, user),
            name=body.name,
            priority=body.priority,
            executor=body.executor,
        )
    except dataset_operations.OperationInvalid as exc:
        raise ValidationFailed(exc.errors) from None
    return job_read(session, job, user.name, warning=wake("data", body.priority, row_id(job)))
