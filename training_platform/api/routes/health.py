"""Liveness/readiness and Prometheus metrics (no auth: for load balancers and scrapers; no user data)."""

from __future__ import annotations

from importlib import metadata

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import func, text
from sqlmodel import Session, select

from training_platform.api import broker, schemas
from training_platform.db.models import Job, JobStatus, MetricPoint
from training_platform.db.session import get_engine

router = APIRouter(tags=["health"])

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _version() -> str | None:
    try:
        return metadata.version("training_platform")
    except metadata.PackageNotFoundError:
        return None


def _database_status() -> str:
    try:
        with Session(get_engine()) as session:
            session.exec(text("SELECT 1")).one()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"error: {first[:300]}"


@router.get("/health", response_model=schemas.HealthOut,
            responses={503: {"model": schemas.HealthOut, "description": "The database is unreachable."}})
def health():
    """200 while the database answers (even if the broker is down: jobs queue in the database); 503 if not."""
    database = _database_status()
    body = {"status": "ok" if database == "ok" else "error", "database": database,
            "broker": "ok" if broker.ping() else "unreachable", "version": _version()}
    return JSONResponse(body, status_code=200 if database == "ok" else 503)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {PROMETHEUS_CONTENT_TYPE: {}}, "description": "Prometheus text 0.0.4"}})
def prometheus_metrics(request: Request):
    lines: list[str] = []
    try:
        with Session(get_engine()) as session:
            counts = dict(session.exec(select(Job.status, func.count()).group_by(Job.status)).all())
            points = session.exec(select(func.count()).select_from(MetricPoint)).one()
        lines += ["# HELP tp_jobs Jobs by status.", "# TYPE tp_jobs gauge"]
        lines += [f'tp_jobs{{status="{s.value}"}} {counts.get(s.value, 0)}' for s in JobStatus]
        lines += ["# HELP tp_metric_points_total Training metric points stored.",
                  "# TYPE tp_metric_points_total gauge", f"tp_metric_points_total {points}"]
        up = 1
    except Exception:  # noqa: BLE001 - the HTTP metrics are still worth scraping
        up = 0
    lines += ["# HELP tp_database_up Whether the database answered this scrape.", "# TYPE tp_database_up gauge",
              f"tp_database_up {up}"]
    lines += request.app.state.request_metrics.render()
    return Response("\n".join(lines) + "\n", media_type=PROMETHEUS_CONTENT_TYPE)
