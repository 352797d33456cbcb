"""Job templates: a user's named training configs, shared with every user when marked.

A template's config is checked by the schema and the cross-field rules (layers 1-2, `parse_config` +
`check_rules`) and stored as written (no defaults filled in). The path policy is NOT applied here: a template may
name files its reader is not allowed to read (a shared template is used by others, whose readable areas differ),
and paths are checked when a job is submitted from it, with the submitter's rights (POST /jobs).

Visibility: your templates, the ones others shared, and (admins) every template; another user's unshared template
is 404. Only the owner or an admin changes or deletes one (a shared template of someone else: 403).
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from sqlalchemy import func, or_, true
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep
from training_platform.api.errors import ValidationFailed, conflict, forbidden, not_found
from training_platform.core.timeutil import utcnow
from training_platform.db.models import JobTemplate, User, row_id
from training_platform.training.config import ConfigError, check_rules, parse_config

log = logging.getLogger("training_platform.api.templates")

router = APIRouter(prefix="/templates", tags=["templates"])

MAX_CONFIG_BYTES = 64 * 1024  # as JSON; a real training config is ~1 KB


def _check_config(config: dict[str, Any]) -> None:
    """422 naming every problem (config fields are named as POST /jobs names them)."""
    if len(json.dumps(config, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_CONFIG_BYTES:
        raise ValidationFailed([("config", f"at most {MAX_CONFIG_BYTES // 1024} KiB as JSON")])
    try:
        cfg = parse_config(config)
    except ConfigError as exc:
        raise errors.config_error(exc) from None
    problems = check_rules(cfg)
    if problems:
        raise errors.config_error(ConfigError(problems))


def _read(template: JobTemplate, owner: str) -> dict:
    return {**template.model_dump(), "owner": owner}


def _owner_name(session: Session, owner_id: int) -> str:
    owner = session.get(User, owner_id)
    return owner.name if owner is not None else f"#{owner_id}"


def _visible(session: Session, user: User, template_id: int) -> JobTemplate:
    template = session.get(JobTemplate, template_id)
    if template is None or not (user.is_admin or template.owner_id == user.id or template.shared):
        raise not_found(f"template {template_id}")
    return template


def _owned(session: Session, user: User, template_id: int, action: str) -> JobTemplate:
    template = _visible(session, user, template_id)
    if not user.is_admin and template.owner_id != user.id:
        raise forbidden(f"only the owner of template {template_id} or an admin can {action} it")
    return template


def _name_taken(session: Session, owner_id: int, name: str, but: int | None = None) -> bool:
    query = select(JobTemplate.id).where(JobTemplate.owner_id == owner_id, JobTemplate.name == name)
    if but is not None:
        query = query.where(JobTemplate.id != but)
    return session.exec(query).first() is not None


def _commit(session: Session, owner: str, name: str) -> None:
    try:
        session.commit()
    except IntegrityError:  # created concurrently
        session.rollback()
        raise conflict(f"{owner} already has a template named {name!r}") from None


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.TemplateRead,
    dependencies=[JsonBody],
    responses=errors.responses(409),
)
def create_template(body: schemas.TemplateCreate, session: SessionDep, user: CurrentUser):
    """A named config (checked by the schema and the cross-field rules; its paths are checked when a job is
    submitted from it). 409 when you already have a template of that name."""
    _check_config(body.config)
    if _name_taken(session, row_id(user), body.name):
        raise conflict(f"{user.name} already has a template named {body.name!r}")
    now = utcnow()
    template = JobTemplate(
        owner_id=row_id(user),
        name=body.name,
        description=body.description,
        config=body.config,
        shared=body.shared,
        created_at=now,
        updated_at=now,
    )
    session.add(template)
    _commit(session, user.name, body.name)
    log.info(
        "template %s (%r) created by %s%s",
        template.id,
        template.name,
        user.name,
        " (shared)" if template.shared else "",
    )
    return _read(template, user.name)


@router.get("", response_model=schemas.Page[schemas.TemplateRead])
def list_templates(
    session: SessionDep,
    user: CurrentUser,
    q: Annotated[str | None, Query(max_length=200, description="Name contains (case-insensitive).")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    """Your templates and those others shared, by name (admins: every template)."""
    conditions = [] if user.is_admin else [or_(col(JobTemplate.owner_id) == user.id, col(JobTemplate.shared) == true())]
    if q:
        conditions.append(func.lower(JobTemplate.name).contains(q.lower(), autoescape=True))
    total = session.exec(select(func.count()).select_from(JobTemplate).where(*conditions)).one()
    rows = session.exec(
        select(JobTemplate, User.name)
        .join(User, col(User.id) == JobTemplate.owner_id)
        .where(*conditions)
        .order_by(col(JobTemplate.name), col(JobTemplate.id))
        .limit(limit)
        .offset(offset)
    ).all()
    return {"items": [_read(t, owner) for t, owner in rows], "total": total, "limit": limit, "offset": offset}


@router.get("/{template_id}", response_model=schemas.TemplateRead)
def get_template(template_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    template = _visible(session, user, template_id)
    return _read(template, _owner_name(session, template.owner_id))


@router.patch(
    "/{template_id}", response_model=schemas.TemplateRead, dependencies=[JsonBody], responses=errors.responses(403, 409)
)
def update_template(template_id: schemas.DbId, body: schemas.TemplateUpdate, session: SessionDep, user: CurrentUser):
    """Owner or admin. Only the fields sent change; a new config is checked like on create."""
    template = _owned(session, user, template_id, "change")
    owner = _owner_name(session, template.owner_id)
    if body.config is not None:
        _check_config(body.config)
    if (
        body.name is not None
        and body.name != template.name
        and _name_taken(session, template.owner_id, body.name, but=template.id)
    ):
        raise conflict(f"{owner} already has a template named {body.name!r}")
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    if changes:
        for key, value in changes.items():
            setattr(template, key, value)
        template.updated_at = utcnow()
        session.add(template)
        _commit(session, owner, template.name)
        log.info("template %s changed by %s: %s", template.id, user.name, ", ".join(sorted(changes)))
    return _read(template, owner)


@router.delete(
    "/{template_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=errors.responses(403)
)
def delete_template(template_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """Owner or admin. Jobs submitted from the template are not affected."""
    template = _owned(session, user, template_id, "delete")
    session.delete(template)
    session.commit()
    log.info("template %s (%r) deleted by %s", template_id, template.name, user.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
