"""Metric series for charts, downsampled in SQL.

A series with more points than asked for is cut into equal step ranges (buckets); each bucket contributes its
minimum and its maximum point (the first step where each occurs), and the series' first and last points are always
kept. Spikes therefore survive, and the database does the work: one aggregate query per series, never a million rows
through Python. The SQL is plain (CTE, GROUP BY, CASE) and runs on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import math

from sqlalchemy import text
from sqlmodel import Session

_RANGE = "job_id = :job_id AND name = :name AND step >= :lo AND step <= :hi"

# Whether a series needs bucketing: count at most max_points + 1 rows (an index range scan, never the whole series).
_CAPPED_COUNT = text(f"SELECT COUNT(*) FROM (SELECT 1 FROM metric_points WHERE {_RANGE} LIMIT :cap) AS capped")  # noqa: S608

_FIRST = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step LIMIT 1")  # noqa: S608
_LAST = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step DESC LIMIT 1")  # noqa: S608

_ALL = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step")  # noqa: S608

# Bucket b of a point: (step - first) * buckets / span, integer division (CAST: steps are 32-bit on PostgreSQL).
# Pass 1 aggregates min/max per bucket in one scan. Pass 2 finds, per bucket, the first step holding each extreme
# with a correlated range scan of that bucket only (the steps of bucket b are [first + ceil(b*span/buckets),
# first + ceil((b+1)*span/buckets)) ), so the whole query stays linear in the number of points; a plain JOIN of
# points to buckets is quadratic on SQLite.
_BUCKETED = text(f"""
WITH agg AS (
    SELECT b, MIN(value) AS mn, MAX(value) AS mx
    FROM (SELECT value, (CAST(step AS BIGINT) - :first) * :buckets / :span AS b
          FROM metric_points WHERE {_RANGE}) AS pts
    GROUP BY b
), ranges AS (
    SELECT b, mn, mx,
           :first + (b * :span + :buckets - 1) / :buckets AS lo,
           :first + ((b + 1) * :span + :buckets - 1) / :buckets AS hi
    FROM agg
)
SELECT b, mn, mx,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = :name AND m.step >= ranges.lo AND m.step < ranges.hi
          AND m.value = ranges.mn) AS step_mn,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = :name AND m.step >= ranges.lo AND m.step < ranges.hi
          AND m.value = ranges.mx) AS step_mx
FROM ranges
ORDER BY b
""")  # noqa: S608


def _clean(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def series(session: Session, job_id: int, name: str, *, max_points: int, min_step: int | None = None,
           max_step: int | None = None) -> tuple[list[tuple[int, float | None]], bool]:
    """([(step, value), ...] sorted by step, whether it was downsampled). A downsampled series has
    B = max(1, (max_points - 2) // 2) buckets, so at most 2B + 2 points: <= max_points for max_points >= 4."""
    params = {"job_id": job_id, "name": name,
              "lo": -(2**62) if min_step is None else min_step, "hi": 2**62 if max_step is None else max_step}
    count = session.exec(_CAPPED_COUNT, params={**params, "cap": max_points + 1}).one()[0]
    if not count:
        return [], False
    if count <= max_points:
        rows = session.exec(_ALL, params=params).all()
        return [(int(s), _clean(v)) for s, v in rows], False

    first_row = session.exec(_FIRST, params=params).one()
    last_row = session.exec(_LAST, params=params).one()
    first, last = int(first_row[0]), int(last_row[0])
    points: dict[int, float | None] = {first: _clean(first_row[1]), last: _clean(last_row[1])}
    buckets = max(1, (max_points - 2) // 2)
    span = last - first + 1
    if session.get_bind().dialect.name == "postgresql":
        # The planner cannot know there are only `buckets` groups: without these it sorts the series on disk
        # and JIT-compiles the query (seconds for a million points instead of a fraction).
        session.exec(text("SET LOCAL work_mem = '64MB'"))
        session.exec(text("SET LOCAL jit = off"))
    rows = session.exec(_BUCKETED, params={**params, "first": first, "buckets": buckets, "span": span}).all()
    for _bucket, mn, mx, step_mn, step_mx in rows:
        if step_mn is not None:
            points[int(step_mn)] = _clean(mn)
        if step_mx is not None:
            points[int(step_mx)] = _clean(mx)
    return sorted(points.items()), True
