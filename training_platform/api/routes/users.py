"""Users: who am I; admins create users (the API token is shown once) and list them."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, status
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import AdminUser, CurrentUser, JsonBody, SessionDep
from training_platform.api.errors import conflict
from training_platform.db import crud
from training_platform.db.models import User

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
