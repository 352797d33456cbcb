"""Admin-defined endpoints (table `endpoints`) as `training_platform.core.endpoints.Endpoint`s, and the resolver every
caller uses: the operator's endpoints (TP_ENDPOINTS / TP_ENDPOINTS_FILE) first, then these rows.

    endpoints = resolver(session)                       # in a request (the request's session)
    endpoints = worker_resolver()                       # in a worker: a short session per lookup
    endpoint = endpoints.resolve("judge", "gpt-x")      # UnknownEndpoint / ModelNotServed otherwise
"""

from __future__ import annotations

import logging

from sqlmodel import Session, select

from training_platform.core.endpoints import Endpoint, EndpointError, Endpoints, make_endpoint
from training_platform.db.models import Endpoint as EndpointRow

log = logging.getLogger("training_platform.core.endpoints")


def from_row(row: EndpointRow) -> Endpoint | None:
    """The row as an Endpoint, validated again (a row written around the API with a bad URL is ignored)."""
    try:
        return make_endpoint(
            row.name,
            {"base_url": row.base_url, "api_key_env": row.api_key_env, "models": list(row.models or [])},
            "admin",
        )
    except EndpointError as exc:
        log.warning("endpoint %r in the database is invalid and ignored: %s", row.name, exc)
        return None


def get_row(session: Session, name: str) -> EndpointRow | None:
    return session.exec(select(EndpointRow).where(EndpointRow.name == name)).first()


def resolver(session: Session, settings=None) -> Endpoints:
    def lookup(name: str) -> Endpoint | None:
        row = get_row(session, name)
        return from_row(row) if row is not None else None

    def names() -> list[Endpoint]:
        rows = session.exec(select(EndpointRow).order_by(EndpointRow.name)).all()
        return [e for e in (from_row(r) for r in rows) if e is not None]

    return Endpoints.from_env(settings, lookup, names)


def worker_resolver(settings=None) -> Endpoints:
    """For workers and beat: each lookup opens its own short session (nothing held while a run lasts)."""
    from training_platform.db.session import session_scope

    def lookup(name: str) -> Endpoint | None:
        with session_scope() as session:
            row = get_row(session, name)
            return from_row(row) if row is not None else None

    def names() -> list[Endpoint]:
        with session_scope() as session:
            rows = session.exec(select(EndpointRow).order_by(EndpointRow.name)).all()
            return [e for e in (from_row(r) for r in rows) if e is not None]

    return Endpoints.from_env(settings, lookup, names)
