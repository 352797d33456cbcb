"""Named outbound endpoints (OpenAI-compatible servers: judges, reward models, served models to evaluate).

Requests (evaluations, schedules, dataset scoring) name an endpoint and a model; only the operator decides where
those calls go and which key they carry. The operator's endpoints come from `TP_ENDPOINTS` / `TP_ENDPOINTS_FILE`
(read-only here: 409 on write); admins add more here. Everyone signed in lists names and models; admins also see
`base_url` and the NAME of the variable holding the key on the workers. No response ever carries a key.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from training_platform.api import schemas
from training_platform.api.deps import AdminUser, CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, not_found
from training_platform.core.endpoints import (
    MAX_MODEL_NAME,
    MAX_MODELS,
    Endpoint,
    EndpointConfigError,
    EndpointError,
    Endpoints,
    make_endpoint,
)
from training_platform.core.timeutil import utcnow
from training_platform.db import endpoints_crud
from training_platform.db.models import Endpoint as EndpointRow
from training_platform.db.models import User

log = logging.getLogger("training_platform.api.endpoints")

router = APIRouter(prefix="/endpoints", tags=["endpoints"])

EndpointName = Annotated[str, Path(min_length=1, max_length=64, description="The endpoint's name.")]
ModelName = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_NAME)]


class EndpointCreate(schemas.RequestBody):
    name: str = Field(
        min_length=1,
        max_length=64,
        description="Letters, digits, '_', '.', '-'. `platform` is reserved for the platform's own served models.",
    )
    base_url: str = Field(
        min_length=1, max_length=2048, description="http:// or https:// API root, e.g. https://api.example.com/v1."
    )
    api_key_env: str | None = Field(
        None,
        max_length=128,
        description="The NAME of the environment variable "
        "holding the key on the workers (not the "
        "key). Unset: no Authorization header.",
    )
    models: list[ModelName] = Field(
        default_factory=list, max_length=MAX_MODELS, description="Models requests may name (empty: any)."
    )


class EndpointUpdate(schemas.RequestBody):
    base_url: str | None = Field(None, min_length=1, max_length=2048)
    api_key_env: str | None = Field(None, max_length=128, description="null removes it.")
    models: list[ModelName] | None = Field(None, max_length=MAX_MODELS)


class EndpointRead(BaseModel):
    name: str
    models: list[str] = Field(description="The models requests may name (empty: any).")
    source: Literal["env", "admin", "platform"] = Field(
        description="`env`: the operator's TP_ENDPOINTS (read-only here); `admin`: defined over this API."
    )
    base_url: str | None = Field(None, description="Admins only.")
    api_key_env: str | None = Field(None, description="Admins only: the variable's name, never the key.")


_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"model": schemas.ErrorOut, "description": "Not an admin."},
    409: {"model": schemas.ErrorOut},
    422: {"model": schemas.ErrorOut},
    503: {"model": schemas.ErrorOut, "description": "The operator's TP_ENDPOINTS is invalid."},
}


def _view(endpoint: Endpoint, user: User) -> dict:
    return endpoint.admin_view() if user.is_admin else endpoint.public()


def _broken_config(exc: EndpointConfigError, user: User) -> HTTPException:
    log.error("endpoint configuration: %s", exc)
    detail = str(exc) if user.is_admin else "the operator's endpoint configuration is invalid; ask them to fix it"
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=detail)


def _env(endpoints: Endpoints, user: User) -> dict[str, Endpoint]:
    try:
        return endpoints.env
    except EndpointConfigError as exc:
        raise _broken_config(exc, user) from None


def _invalid(exc: EndpointError) -> ValidationFailed:
    return ValidationFailed([(exc.field or "<body>", str(exc))])


@router.get("", response_model=schemas.Page[EndpointRead], responses={503: _ERRORS[503]})
def list_endpoints(
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    offset: Annotated[int, Query(ge=0)] = 0,
):
    """Every endpoint requests may name, by name. Plain users see names, models and where they are defined."""
    endpoints = endpoints_crud.resolver(session, settings)
    _env(endpoints, user)
    items = endpoints.all()
    return {
        "items": [_view(e, user) for e in items[offset : offset + limit]],
        "total": len(items),
        "limit": limit,
        "offset": offset,
    }


@router.get("/{name}", response_model=EndpointRead, responses={404: {"model": schemas.ErrorOut}, 503: _ERRORS[503]})
def get_endpoint(name: EndpointName, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    endpoints = endpoints_crud.resolver(session, settings)
    _env(endpoints, user)
    endpoint = endpoints.get(name)
    if endpoint is None:
        raise not_found(f"endpoint {name!r}")
    return _view(endpoint, user)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=EndpointRead, dependencies=[JsonBody], responses=_ERRORS
)
def create_endpoint(body: EndpointCreate, session: SessionDep, admin: AdminUser, settings: SettingsDep):
    """Admins only. The URL must be http(s); the key stays in the workers' environment under `api_key_env`."""
    try:
        endpoint = make_endpoint(body.name, body.model_dump(exclude={"name"}), "admin")
    except EndpointError as exc:
        raise _invalid(exc) from None
    if endpoint.name in _env(endpoints_crud.resolver(session, settings), admin):
        raise conflict(f"endpoint {endpoint.name!r} is defined by the operator (TP_ENDPOINTS): read-only here")
    if endpoints_crud.get_row(session, endpoint.name) is not None:
        raise conflict(f"an endpoint named {endpoint.name!r} already exists")
    row = EndpointRow(
        name=endpoint.name,
        base_url=endpoint.base_url,
        api_key_env=endpoint.api_key_env,
        models=list(endpoint.models),
        created_by=admin.id,
    )
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise conflict(f"an endpoint named {endpoint.name!r} already exists") from None
    log.info("endpoint %r created by %s (models: %s)", endpoint.name, admin.name, list(endpoint.models) or "any")
    return endpoint.admin_view()


def _admin_row(session, admin: User, settings, name: str) -> EndpointRow:
    if name in _env(endpoints_crud.resolver(session, settings), admin):
        raise conflict(
            f"endpoint {name!r} is defined by the operator (TP_ENDPOINTS / TP_ENDPOINTS_FILE): read-only here"
        )
    row = endpoints_crud.get_row(session, name)
    if row is None:
        raise not_found(f"endpoint {name!r}")
    return row


@router.patch(
    "/{name}",
    response_model=EndpointRead,
    dependencies=[JsonBody],
    responses={404: {"model": schemas.ErrorOut}, **_ERRORS},
)
def update_endpoint(
    name: EndpointName, body: EndpointUpdate, session: SessionDep, admin: AdminUser, settings: SettingsDep
):
    """Admins only; endpoints from the environment are read-only (409)."""
    row = _admin_row(session, admin, settings, name)
    changes = body.model_dump(exclude_unset=True)
    spec = {"base_url": row.base_url, "api_key_env": row.api_key_env, "models": list(row.models or [])}
    for key, value in changes.items():
        if value is None and key != "api_key_env":
            raise ValidationFailed([(key, "may not be null")])
        spec[key] = value
    try:
        endpoint = make_endpoint(row.name, spec, "admin")
    except EndpointError as exc:
        raise _invalid(exc) from None
    row.base_url, row.api_key_env, row.models = endpoint.base_url, endpoint.api_key_env, list(endpoint.models)
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    log.info("endpoint %r updated by %s (%s)", name, admin.name, ", ".join(sorted(changes)) or "no change")
    return endpoint.admin_view()


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={404: {"model": schemas.ErrorOut}, **_ERRORS},
)
def delete_endpoint(name: EndpointName, session: SessionDep, admin: AdminUser, settings: SettingsDep):
    """Admins only. Evaluations, schedules and dataset jobs naming it fail with a clear message from then on."""
    row = _admin_row(session, admin, settings, name)
    session.delete(row)
    session.commit()
    log.info("endpoint %r deleted by %s", name, admin.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
