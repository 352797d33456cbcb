"""Liveness/readiness and Prometheus metrics (for load balancers and scrapers: no user data; /metrics requires
TP_METRICS_TOKEN when it is set)."""

from __future__ import annotations

import hmac
import logging
from datetime import timedelta
from importlib import metadata
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import func, text
from sqlmodel import Session, col, select

from training_platform.api import broker, schemas
from training_platform.api.deps import SettingsDep
from training_platform.api.schemas import as_utc
from training_platform.core import telemetry
from training_platform.core.settings import current_settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job, JobStatus, MetricPoint
from training_platform.db.session import get_engine

log = logging.getLogger("training_platform.api.metrics")

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
            session.execute(text("SELECT 1")).one()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"error: {first[:300]}"


@router.get(
    "/health",
    response_model=schemas.HealthOut,
    responses={503: {"model": schemas.HealthOut, "description": "The database is unreachable."}},
)
def health():
    """200 while the database answers (even if the broker is down: jobs queue in the database); 503 if not."""
    database = _database_status()
    body = {
        "status": "ok" if database == "ok" else "error",
        "database": database,
        "broker": "ok" if broker.ping() else "unreachable",
        "version": _version(),
    }
    return JSONResponse(body, status_code=200 if database == "ok" else 503)


ESTIMATE_ABOVE_ROWS = 1_000_000


def _metric_point_count(session: Session) -> int:
    """Exact on SQLite and for small tables; on PostgreSQL past a million rows the planner's estimate (an exact
    COUNT(*) over tens of millions of points at every scrape would be a load of its own)."""
    if session.get_bind().dialect.name == "postgresql":
        estimate = session.execute(
            text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass('metric_points')")
        ).first()
        if estimate is not None and estimate[0] is not None and estimate[0] > ESTIMATE_ABOVE_ROWS:
            return int(estimate[0])
    return session.exec(select(func.count()).select_from(MetricPoint)).one()


class PlatformCollector:
    """Figures read at scrape time (the database is the queue of record; the broker for its list lengths). Aggregates
    only: no user or job names, no per-user counts."""

    def __init__(self, heartbeat_timeout_s: float, ray_address: str | None, data_path: Path) -> None:
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.ray_address = ray_address
        self.data_path = data_path

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        up = 1
        try:
            with Session(get_engine()) as session:
                by_status = dict(session.exec(select(Job.status, func.count()).group_by(Job.status)).all())
                queued = dict(
                    session.exec(
                        select(Job.kind, func.count()).where(Job.status == JobStatus.queued.value).group_by(Job.kind)
                    ).all()
                )
                cutoff = utcnow() - timedelta(seconds=self.heartbeat_timeout_s)
                active = session.exec(
                    select(Job.worker, Job.heartbeat_at).where(
                        col(Job.worker).is_not(None),
                        col(Job.status).in_([JobStatus.preflight.value, JobStatus.running.value]),
                    )
                ).all()
                points = _metric_point_count(session)
        except Exception as exc:  # noqa: BLE001 - the request and job metrics are still worth scraping
            log.warning(
                "/metrics: the database did not answer: %s",
                str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
            )
            up = 0
        if up:
            jobs = GaugeMetricFamily("tp_jobs", "Jobs by status.", labels=["status"])
            for status in JobStatus:
                jobs.add_metric([status.value], by_status.get(status.value, 0))
            yield jobs
            depth = GaugeMetricFamily(
                "tp_queue_depth",
                "Queued jobs per queue (the database is the queue of record; maintenance holds no jobs).",
                labels=["queue"],
            )
            for queue in broker.queues():
                depth.add_metric([queue], queued.get(queue, 0))
            yield depth
            busy = {w for w, beat in active if beat is not None and as_utc(beat) >= cutoff}
            silent = {w for w, _ in active} - busy
            workers = GaugeMetricFamily(
                "tp_workers",
                "Workers holding a job: `busy` (heartbeat within "
                "TP_HEARTBEAT_TIMEOUT) or `unresponsive` (recovery will requeue).",
                labels=["state"],
            )
            workers.add_metric(["busy"], len(busy))
            workers.add_metric(["unresponsive"], len(silent))
            yield workers
            yield GaugeMetricFamily("tp_metric_points", "Training metric points stored.", value=points)
        yield GaugeMetricFamily("tp_database_up", "Whether the database answered this scrape.", value=up)
        lengths = broker.queue_depths()
        yield GaugeMetricFamily(
            "tp_broker_up", "Whether the broker answered this scrape.", value=0 if lengths is None else 1
        )
        if lengths is not None:
            messages = GaugeMetricFamily(
                "tp_broker_queue_messages",
                "Messages waiting in each broker queue (wake-ups: a job can be queued with none).",
                labels=["queue"],
            )
            for queue, count in lengths.items():
                messages.add_metric([queue], count)
            yield messages
        yield from self._ray()

    def _ray(self):
        from prometheus_client.core import GaugeMetricFamily

        snap = None
        if self.ray_address:
            from training_platform.training import ray_cluster

            snap = ray_cluster.cached_snapshot(self.ray_address, self.data_path / "ray")
        yield GaugeMetricFamily(
            "tp_ray_up",
            "Whether the Ray cluster of TP_RAY_ADDRESS answered (0 when unset).",
            value=int(snap is not None and "error" not in snap),
        )
        nodes = [n for n in (snap or {}).get("nodes", []) if n["state"] != "DEAD"]
        yield GaugeMetricFamily(
            "tp_ray_nodes",
            "Alive Ray nodes (0: no Ray cluster configured, TP_RAY_ADDRESS unset, or it did not answer).",
            value=len(nodes),
        )
        for name in ("CPU", "GPU"):
            family = GaugeMetricFamily(
                f"tp_ray_{name.lower()}s", f"{name}s of the Ray cluster: total and in use.", labels=["state"]
            )
            figures = (snap or {}).get("totals", {}).get(name, {"total": 0.0, "used": 0.0})
            family.add_metric(["total"], figures["total"])
            family.add_metric(["used"], figures["used"])
            yield family


def _authorized(request: Request, token: str | None) -> bool:
    if not token:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {PROMETHEUS_CONTENT_TYPE: {}}, "description": "Prometheus text 0.0.4"},
        401: {"model": schemas.ErrorOut, "description": "TP_METRICS_TOKEN is set and the request does not carry it."},
    },
)
def prometheus_metrics(request: Request, settings: SettingsDep):
    """Prometheus metrics of every API and worker process (multiprocess mode) plus platform gauges. Open unless
    TP_METRICS_TOKEN is set, then `Authorization: Bearer <TP_METRICS_TOKEN>` is required."""
    if not _authorized(request, settings.metrics_token):
        return JSONResponse(
            {"detail": "a valid metrics token is required (Authorization: Bearer ...)"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    collector = PlatformCollector(settings.heartbeat_timeout_s, current_settings().ray_address, settings.data_path)
    body, content_type = telemetry.render((collector,))
    return Response(body, media_type=content_type)
