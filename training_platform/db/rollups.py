"""Rollup tiers of metric series: what makes the chart of a million-point run read in milliseconds.

For each job, metric name and width W in `WIDTHS` (64, 256, ..., 4**10 steps), `metric_rollups` holds one row per
aligned bucket `[b * W, (b + 1) * W)` that has points: the minimum and maximum value and the first step holding each.
Tier 64 is computed from the points, every wider tier from the four rows of the tier below, all in SQL (the same
statements on SQLite and PostgreSQL). Tiers are kept exact by recomputing the buckets a write touched: `refresh`
after points were added (crud.add_metric_points), `truncate` after points were deleted from a step on (resume).
Storage: about 1/48 of the points for a series logged every step, 1/5 for one logged every 10 steps.

Readers (api/downsample.py) pick the tier below the bucket width they need and merge at most a few rows per bucket.
Steps < 0 are not rolled up (readers fall back to scanning the points). Anything that writes `metric_points`
directly (a bulk load) must call `rebuild` afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import bindparam, text
from sqlalchemy.sql.elements import BindParameter
from sqlmodel import Session

WIDTHS: tuple[int, ...] = tuple(4**k for k in range(3, 11))  # 64 .. 1,048,576 steps

_UPSERT = """
WHERE true
ON CONFLICT (job_id, name, width, bucket) DO UPDATE SET min_value = excluded.min_value,
    min_step = excluded.min_step, max_value = excluded.max_value, max_step = excluded.max_step
"""

# Tier 64 from the points. Pass 1: min/max per (name, bucket); pass 2: the first step holding each, by a range scan
# of that bucket only (linear; CAST: step * width overflows 32-bit integers on PostgreSQL).
_FROM_POINTS_SQL = """
INSERT INTO metric_rollups (job_id, name, width, bucket, min_value, min_step, max_value, max_step)
SELECT :job_id, a.name, :width, a.b, a.mn,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = a.name AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width
          AND m.value = a.mn),
       a.mx,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = a.name AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width
          AND m.value = a.mx)
FROM (SELECT name, CAST(step AS BIGINT) / :width AS b, MIN(value) AS mn, MAX(value) AS mx
      FROM metric_points
      WHERE job_id = :job_id AND name IN :names AND step >= :lo AND step < :hi
      GROUP BY name, CAST(step AS BIGINT) / :width) AS a
"""

# Tier W from tier W/4 (its child rows 4b .. 4b+3).
_FROM_CHILDREN_SQL = """
INSERT INTO metric_rollups (job_id, name, width, bucket, min_value, min_step, max_value, max_step)
SELECT :job_id, a.name, :width, a.b, a.mn,
       (SELECT MIN(r.min_step) FROM metric_rollups AS r
        WHERE r.job_id = :job_id AND r.name = a.name AND r.width = :child AND r.bucket >= a.b * 4
          AND r.bucket < a.b * 4 + 4 AND r.min_value = a.mn),
       a.mx,
       (SELECT MIN(r.max_step) FROM metric_rollups AS r
        WHERE r.job_id = :job_id AND r.name = a.name AND r.width = :child AND r.bucket >= a.b * 4
          AND r.bucket < a.b * 4 + 4 AND r.max_value = a.mx)
FROM (SELECT name, bucket / 4 AS b, MIN(min_value) AS mn, MAX(max_value) AS mx
      FROM metric_rollups
      WHERE job_id = :job_id AND width = :child AND name IN :names AND bucket >= :lo AND bucket < :hi
      GROUP BY name, bucket / 4) AS a
"""

_names: BindParameter[list[str]] = bindparam("names", expanding=True)
_FROM_POINTS = text(_FROM_POINTS_SQL).bindparams(_names)
_FROM_CHILDREN = text(_FROM_CHILDREN_SQL).bindparams(_names)
# When points were only added, no bucket can have become empty: one upsert per tier (no DELETE round trip).
_UPSERT_FROM_POINTS = text(_FROM_POINTS_SQL + _UPSERT).bindparams(_names)
_UPSERT_FROM_CHILDREN = text(_FROM_CHILDREN_SQL + _UPSERT).bindparams(_names)

_DELETE_RANGE = text("""
DELETE FROM metric_rollups
WHERE job_id = :job_id AND width = :width AND name IN :names AND bucket >= :lo AND bucket <= :hi
""").bindparams(bindparam("names", expanding=True))


def refresh(
    session: Session, job_id: int, names: Iterable[str], lo_step: int, hi_step: int, *, grown: bool = False
) -> None:
    """Recompute every tier's buckets overlapping steps [lo_step, hi_step] of these series from what is stored.
    `grown`: points were only added there (none removed), so buckets are upserted instead of deleted and rebuilt."""
    names = sorted(set(names))
    lo_step, hi_step = max(0, int(lo_step)), int(hi_step)
    if not names or hi_step < lo_step:
        return
    for i, width in enumerate(WIDTHS):
        lo, hi = lo_step // width, hi_step // width
        params = {"job_id": job_id, "width": width, "names": names, "lo": lo, "hi": hi}
        if not grown:
            session.execute(_DELETE_RANGE, params)
        if i == 0:
            session.execute(
                _UPSERT_FROM_POINTS if grown else _FROM_POINTS, {**params, "lo": lo * width, "hi": (hi + 1) * width}
            )
        else:
            session.execute(
                _UPSERT_FROM_CHILDREN if grown else _FROM_CHILDREN,
                {**params, "child": WIDTHS[i - 1], "lo": lo * 4, "hi": (hi + 1) * 4},
            )


def truncate(session: Session, job_id: int, step: int) -> None:
    """After the points with steps > `step` were deleted: drop the buckets past it, recompute the one holding it."""
    if step < 0:
        session.execute(text("DELETE FROM metric_rollups WHERE job_id = :job_id"), {"job_id": job_id})
        return
    names = [
        r[0]
        for r in session.execute(
            text("SELECT DISTINCT name FROM metric_rollups WHERE job_id = :job_id AND width = :top"),
            {"job_id": job_id, "top": WIDTHS[-1]},
        ).all()
    ]
    session.execute(
        text("DELETE FROM metric_rollups WHERE job_id = :job_id AND CAST(bucket AS BIGINT) * width > :s"),
        {"job_id": job_id, "s": step},
    )
    refresh(session, job_id, names, step, step)


_METRIC_NAMES = text("""
WITH RECURSIVE names(name) AS (
    SELECT MIN(name) FROM metric_points WHERE job_id = :job_id
    UNION ALL
    SELECT (SELECT MIN(m.name) FROM metric_points AS m WHERE m.job_id = :job_id AND m.name > names.name)
    FROM names WHERE names.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL
""")


def metric_names(session: Session, job_id: int) -> list[str]:
    return [r[0] for r in session.execute(_METRIC_NAMES, {"job_id": job_id}).all()]


def rebuild(session: Session, job_id: int) -> None:
    """All tiers of a job from scratch (after a bulk load that bypassed crud)."""
    session.execute(text("DELETE FROM metric_rollups WHERE job_id = :job_id"), {"job_id": job_id})
    row = session.execute(text("SELECT MAX(step) FROM metric_points WHERE job_id = :job_id"), {"job_id": job_id}).one()
    if row[0] is not None:
        refresh(session, job_id, metric_names(session, job_id), 0, int(row[0]))
