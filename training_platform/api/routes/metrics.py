"""Metric series of a job for charts, downsampled server-side (see `training_platform.api.downsample`)."""

from __future__ import annotations

from datetime import UTC
from typing import Annotated

from fastapi import APIRouter, Query

from training_platform.api import schemas
from training_platform.api.deps import SessionDep, VisibleJob
from training_platform.api.downsample import series
from training_platform.api.errors import ValidationFailed
from training_platform.db import crud
from training_platform.db.models import row_id

router = APIRouter(prefix="/jobs", tags=["metrics"])


@router.get("/{job_id}/metrics", response_model=schemas.MetricsOut)
def job_metrics(
    job: VisibleJob,
    session: SessionDep,
    names: Annotated[
        str | None, Query(description="Comma-separated metric names; default: all.", max_length=4000)
    ] = None,
    max_points: Annotated[
        int,
        Query(
            ge=2, le=10_000, description="Per series; longer series are bucketed (min/max of each bucket + first/last)."
        ),
    ] = 1000,
    min_step: Annotated[int | None, Query(ge=0, le=schemas.DB_INT_MAX)] = None,
    max_step: Annotated[int | None, Query(ge=0, le=schemas.DB_INT_MAX)] = None,
    with_time: Annotated[
        bool,
        Query(
            description="Also answer when each point was logged (`times`), for charts over wall-clock time and an ETA."
        ),
    ] = False,
):
    if min_step is not None and max_step is not None and min_step > max_step:
        raise ValidationFailed([("query.min_step", f"must be <= max_step ({max_step}), got {min_step}")])
    job_id = row_id(job)
    available = sorted(crud.metric_names(session, job_id))
    wanted = [n.strip() for n in names.split(",") if n.strip()] if names else available
    out: dict[str, list] = {}
    downsampled: dict[str, bool] = {}
    for name in dict.fromkeys(wanted):
        if name not in available:
            out[name] = []
            downsampled[name] = False
            continue
        out[name], downsampled[name] = series(
            session, job_id, name, max_points=max_points, min_step=min_step, max_step=max_step
        )
    times = (
        {name: _logged_at(session, job_id, name, [p[0] for p in points]) for name, points in out.items()}
        if with_time
        else None
    )
    return {"series": out, "names_available": available, "downsampled": downsampled, "times": times}


def _logged_at(session, job_id: int, name: str, steps: list[int]) -> list[float | None]:
    """When each of `steps` was logged (at most max_points of them: one indexed lookup per chunk)."""
    from sqlmodel import col, select

    from training_platform.db.models import MetricPoint

    found: dict[int, float] = {}
    for start in range(0, len(steps), 1000):
        chunk = steps[start : start + 1000]
        rows = session.exec(
            select(MetricPoint.step, MetricPoint.ts).where(
                MetricPoint.job_id == job_id, MetricPoint.name == name, col(MetricPoint.step).in_(chunk)
            )
        ).all()
        for step, ts in rows:
            found[step] = round(ts.replace(tzinfo=ts.tzinfo or UTC).timestamp(), 3)
    return [found.get(step) for step in steps]
