"""Users: who am I; admins create users (the API token is shown once), list them and set their quotas."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, status
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import AdminUser, CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import conflict
from training_platform.db import crud
from training_platform.db.models import User
from training_platform.services import quotas, scheduler

log = logging.getLogger("training_platform.api.users")

router = APIRouter(prefix="/users", tags=["users"])


@router.get("/me", response_model=schemas.UserRead)
def me(user: CurrentUser):
    return user


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.UserCreated,
    dependencies=[JsonBody],
    responses=errors.responses(403, 409),
)
def create_user(body: schemas.UserCreate, session: SessionDep, admin: AdminUser):
    """Admins only. The response carries the new user's API token; it is not stored and cannot be shown again."""
    try:
        user, token = crud.create_user(session, body.name, is_admin=body.is_admin)
        session.commit()
    except (ValueError, IntegrityError):
        session.rollback()
        raise conflict(f"a user named {body.name!r} already exists") from None
    log.info("user %r created by %s (admin=%s)", user.name, admin.name, user.is_admin)  # never the token
    return {"user": user, "token": token}


@router.get("", responses=errors.responses(403), response_model=schemas.Page[schemas.UserRead])
def list_users(
    session: SessionDep, admin: AdminUser, limit: Annotated[int, Query(ge=1, le=200)] = 50, offset: schemas.Offset = 0
):
    total = session.exec(select(func.count()).select_from(User)).one()
    rows = session.exec(select(User).order_by(col(User.id)).limit(limit).offset(offset)).all()
    return {"items": rows, "total": total, "limit": limit, "offset": offset}


def _quota_user(session, user_id: int, caller: User) -> User:
    target = session.get(User, user_id)
    if target is None or (not caller.is_admin and caller.id != user_id):  # another's: as if there were none
        raise errors.not_found(f"user {user_id}")
    return target


@router.get("/{user_id}/quota", response_model=schemas.QuotaRead, responses=errors.responses(404))
def get_quota(user_id: schemas.DbId, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """The user's limits (null: none), whether an admin set them, what they hold now and used this week."""
    return quotas.quota_view(session, _quota_user(session, user_id, user), settings)


@router.put(
    "/{user_id}/quota",
    response_model=schemas.QuotaRead,
    dependencies=[JsonBody],
    responses=errors.responses(403, 404),
)
def put_quota(
    user_id: schemas.DbId, body: schemas.QuotaUpdate, session: SessionDep, admin: AdminUser, settings: SettingsDep
):
    """Admins only. Concurrency limits make the user's jobs wait (never stop a running one); a spent weekly
    budget refuses their new jobs with 403."""
    target = _quota_user(session, user_id, admin)
    quotas.set_quota(
        session,
        target,
        admin,
        max_devices=body.max_devices,
        max_running_jobs=body.max_running_jobs,
        device_hours_per_week=body.device_hours_per_week,
    )
    session.commit()
    log.info("quota of %r set by %s: %s", target.name, admin.name, body.model_dump())
    if scheduler.queued_training_jobs(session):  # a raised limit may let waiting jobs start now
        from training_platform.api.routes.jobs import wake

        wake("train", 0, 0)
    return quotas.quota_view(session, target, settings)
