"""FastAPI dependencies: the DB session, the current user, jobs the user may see, JSON-only request bodies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from training_platform.api.errors import BODY_VALUE_ERROR, check_json_value, forbidden, not_found
from training_platform.api.schemas import id_path
from training_platform.core.settings import Settings, get_settings
from training_platform.db import crud
from training_platform.db.models import Job, User
from training_platform.db.session import get_session

SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

LOCAL_USER = "local"

_bearer = HTTPBearer(auto_error=False, description="API token (`tp_...`), sent as `Authorization: Bearer <token>`.")


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"})


def _local_user(session: Session) -> User:
    """`TP_AUTH_MODE=open`: everyone is the local admin, created on first use."""
    user = session.exec(select(User).where(User.name == LOCAL_USER)).first()
    if user is not None:
        return user
    try:
        user = User(name=LOCAL_USER, is_admin=True)
        session.add(user)
        session.commit()
        return user
    except IntegrityError:  # created concurrently by another request
        session.rollback()
        return session.exec(select(User).where(User.name == LOCAL_USER)).one()


def get_current_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    if get_settings().auth_mode == "open":
        return _local_user(session)
    if credentials is None or not credentials.credentials:
        raise _unauthorized("not authenticated: send 'Authorization: Bearer <token>'")
    user = crud.user_for_token(session, credentials.credentials)
    if user is None:
        raise _unauthorized("invalid or revoked token")
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def require_admin(user: CurrentUser) -> User:
    if not user.is_admin:
        raise forbidden("admin only")
    return user


AdminUser = Annotated[User, Depends(require_admin)]


def can_see(user: User, job: Job) -> bool:
    return user.is_admin or job.owner_id == user.id


def get_visible_job(session: Session, user: User, job_id: int) -> Job:
    """The job, if this user may see it. Other users' jobs are 404 (not 403) so ids do not leak."""
    job = session.get(Job, job_id)
    if job is None or not can_see(user, job):
        raise not_found(f"job {job_id}")
    return job


def _visible_job(session: SessionDep, user: CurrentUser, job_id: Annotated[int, id_path("Job id.")]) -> Job:
    return get_visible_job(session, user, job_id)


VisibleJob = Annotated[Job, Depends(_visible_job)]


async def require_json(request: Request) -> None:
    """415 for a request body that is not declared as JSON (FastAPI would otherwise report a confusing type error:
    it parses a body as JSON only when the Content-Type says so). 422 for values the JSON parser accepts but the
    platform cannot store: NaN/Infinity, NUL characters, nesting deeper than errors.MAX_JSON_DEPTH."""
    has_body = request.headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in request.headers
    if not has_body:
        return
    mime = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if mime != "application/json" and not (mime.startswith("application/") and mime.endswith("+json")):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            detail="the request body must be sent with Content-Type: application/json, got "
            + (repr(mime) if mime else "no Content-Type"),
        )
    if not await request.body():
        return
    try:
        data = await request.json()  # parsed (and cached) by FastAPI already; a decode error was reported there
    except ValueError:
        return
    problems = check_json_value(data, ("body",))
    if problems:
        raise RequestValidationError(problems)


def no_nul_in_params(request: Request) -> None:
    """Query and path strings with a NUL character (PostgreSQL refuses them in any text): 422 naming each."""
    problems = [
        {
            "type": BODY_VALUE_ERROR,
            "loc": (source, name),
            "msg": "must not contain NUL (\\u0000) characters",
            "input": None,
        }
        for source, items in (("query", request.query_params.multi_items()), ("path", request.path_params.items()))
        for name, value in items
        if "\x00" in str(value) or "\x00" in name
    ]
    if problems:
        raise RequestValidationError(problems)


JsonBody = Depends(require_json)
