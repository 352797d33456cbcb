"""Job-end webhooks: a user registers URLs to be POSTed when one of their jobs (train, data, eval) succeeds, fails or
is cancelled. Only hosts the operator allows (`TP_WEBHOOK_HOSTS`; empty: webhooks are disabled) may be named; the
optional `secret` signs each body (`X-TP-Signature: sha256=<HMAC-SHA256 hex>`) and is never returned. Deliveries
happen on a maintenance worker (training_platform/services/webhooks.py); the last one's outcome is shown here.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel, Field
from sqlalchemy import func
from sqlmodel import col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, not_found
from training_platform.db.models import User, Webhook, row_id
from training_platform.services.webhooks import (
    MAX_SECRET,
    MAX_URL,
    MAX_WEBHOOKS_PER_USER,
    MIN_SECRET,
    WebhookConfigError,
    WebhookError,
    allowed_hosts,
    check_events,
    check_url,
    shown_host,
)

log = logging.getLogger("training_platform.api.webhooks")

router = APIRouter(prefix="/webhooks", tags=["webhooks"])

Event = Literal["job.succeeded", "job.failed", "job.cancelled"]


def _all_events() -> list[Event]:
    return ["job.succeeded", "job.failed", "job.cancelled"]


class WebhookCreate(schemas.RequestBody):
    url: str = Field(
        min_length=1, max_length=MAX_URL, description="http(s) URL on a host the operator allows (TP_WEBHOOK_HOSTS)."
    )
    events: list[Event] = Field(
        default_factory=_all_events,
        min_length=1,
        max_length=3,
        description="Which job ends to send.",
    )
    secret: str | None = Field(
        None,
        min_length=MIN_SECRET,
        max_length=MAX_SECRET,
        description="Signs each body: `X-TP-Signature: sha256=<HMAC-SHA256 hex>`. Write-only: never returned.",
    )


class LastDelivery(BaseModel):
    at: schemas.UtcDatetime
    event: str | None = None
    job_id: int | None = None
    status_code: int | None = Field(None, description="The receiver's HTTP status (none: no answer).")
    error: str | None = Field(None, description="Why it failed (none: delivered, 2xx).")
    attempts: int = 0


class WebhookRead(BaseModel):
    id: int
    owner: str
    url: str
    events: list[str]
    has_secret: bool = Field(description="Whether bodies are signed (the secret itself is never returned).")
    created_at: schemas.UtcDatetime
    last_delivery: LastDelivery | None = None


def _read(row: Webhook, owner: str) -> dict:
    last = None
    if row.last_delivery_at is not None:
        last = {
            "at": row.last_delivery_at,
            "event": row.last_event,
            "job_id": row.last_job_id,
            "status_code": row.last_status_code,
            "error": row.last_error,
            "attempts": row.last_attempts,
        }
    return {
        "id": row.id,
        "owner": owner,
        "url": row.url,
        "events": list(row.events or []),
        "has_secret": bool(row.secret),
        "created_at": row.created_at,
        "last_delivery": last,
    }


def _broken_config(exc: WebhookConfigError, user: User) -> HTTPException:
    log.error("webhook configuration: %s", exc)
    detail = str(exc) if user.is_admin else "the operator's webhook configuration is invalid; ask them to fix it"
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=detail)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookRead,
    dependencies=[JsonBody],
    responses={
        **errors.responses(409),
        503: {"model": schemas.ErrorOut, "description": "The operator's TP_WEBHOOK_HOSTS is invalid."},
    },
)
def create_webhook(body: WebhookCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Registers a webhook of the caller (at most 10 each). 422 naming `url` when its host is not one the operator
    allows (or when the operator allows none: webhooks are then disabled)."""
    try:
        hosts = allowed_hosts(settings)
    except WebhookConfigError as exc:
        raise _broken_config(exc, user) from None
    try:
        url = check_url(body.url, hosts)
        events = check_events(list(body.events))
    except WebhookError as exc:
        raise ValidationFailed([(exc.field or "<body>", str(exc))]) from None
    count = session.exec(select(func.count()).select_from(Webhook).where(Webhook.owner_id == user.id)).one()
    if count >= MAX_WEBHOOKS_PER_USER:
        raise conflict(f"at most {MAX_WEBHOOKS_PER_USER} webhooks per user: delete one first")
    row = Webhook(owner_id=row_id(user), url=url, events=events, secret=body.secret or None)
    session.add(row)
    session.commit()
    session.refresh(row)
    log.info("webhook %s (%s, %s) created by %s", row.id, shown_host(url), ",".join(events), user.name)
    return _read(row, user.name)


@router.get("", response_model=schemas.Page[WebhookRead])
def list_webhooks(
    session: SessionDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: schemas.Offset = 0,
):
    """The caller's webhooks (admins: everyone's) with their last delivery. Secrets are never shown."""
    query = select(Webhook, User.name).join(User, col(User.id) == Webhook.owner_id)
    count = select(func.count()).select_from(Webhook)
    if not user.is_admin:
        query, count = query.where(Webhook.owner_id == user.id), count.where(Webhook.owner_id == user.id)
    total = session.exec(count).one()
    rows = session.exec(query.order_by(col(Webhook.id)).offset(offset).limit(limit)).all()
    return {"items": [_read(row, owner) for row, owner in rows], "total": total, "limit": limit, "offset": offset}


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def delete_webhook(webhook_id: Annotated[int, schemas.id_path("Webhook id.")], session: SessionDep, user: CurrentUser):
    """Deletes a webhook (its owner or an admin); deliveries still pending for it are dropped."""
    row = session.get(Webhook, webhook_id)
    if row is None or not (user.is_admin or row.owner_id == user.id):
        raise not_found(f"webhook {webhook_id}")
    session.delete(row)
    session.commit()
    log.info("webhook %s deleted by %s", webhook_id, user.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
