"""Metric series for charts, downsampled from rollup tiers.

A series with more points than asked for (max_points) is cut into B = max(1, (max_points - 2) // 2) or fewer
aligned step buckets `[b * W, (b + 1) * W)`, W the smallest power of two giving at most B buckets between the
series' first and last step; each bucket contributes its minimum and its maximum point (the first step where each
occurs), and the series' first and last points are always kept. Spikes therefore survive, and aligned buckets stay
put while a run grows (the chart does not shimmer on refresh).

The extremes come from `metric_rollups` (db/rollups.py: tiers of width 64, 256, ..., 4**10 written with the
points): the tier just below W, a few rows merged per bucket, so a million-point series costs a few hundred rows
read. Buckets that the rollups cannot answer are aggregated from the points in SQL: W < 64 (at most 32 * B points),
the edge buckets cut by min_step/max_step, and series with negative steps.
"""

from __future__ import annotations

import math

from sqlalchemy import text
from sqlmodel import Session

from training_platform.db import rollups

_RANGE = "job_id = :job_id AND name = :name AND step >= :lo AND step <= :hi"

# Whether a series needs bucketing: count at most max_points + 1 rows (an index range scan, never the whole series).
_CAPPED_COUNT = text(f"SELECT COUNT(*) FROM (SELECT 1 FROM metric_points WHERE {_RANGE} LIMIT :cap) AS capped")  # noqa: S608

_FIRST = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step LIMIT 1")  # noqa: S608
_LAST = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step DESC LIMIT 1")  # noqa: S608

_ALL = text(f"SELECT step, value FROM metric_points WHERE {_RANGE} ORDER BY step")  # noqa: S608

# Equal buckets between first and last (negative steps, which have no rollups). Bucket b of a point:
# (step - first) * buckets / span, integer division (CAST: steps are 32-bit on PostgreSQL). Pass 1 aggregates
# min/max per bucket in one scan. Pass 2 finds, per bucket, the first step holding each extreme with a correlated
# range scan of that bucket only (the steps of bucket b are [first + ceil(b*span/buckets),
# first + ceil((b+1)*span/buckets)) ), so the whole query stays linear in the number of points.
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

# Aligned buckets of width :width from the points in [lo, hi] (steps >= 0): the same two passes.
_ALIGNED = text(f"""
SELECT a.b, a.mn,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = :name AND m.step >= :lo AND m.step <= :hi
          AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width AND m.value = a.mn),
       a.mx,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = :job_id AND m.name = :name AND m.step >= :lo AND m.step <= :hi
          AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width AND m.value = a.mx)
FROM (SELECT CAST(step AS BIGINT) / :width AS b, MIN(value) AS mn, MAX(value) AS mx
      FROM metric_points WHERE {_RANGE}
      GROUP BY CAST(step AS BIGINT) / :width) AS a
""")  # noqa: S608

_TIER = text("""
SELECT bucket, min_value, min_step, max_value, max_step FROM metric_rollups
WHERE job_id = :job_id AND name = :name AND width = :width AND bucket >= :lo AND bucket <= :hi
ORDER BY bucket
""")

Bucket = tuple[float, int, float, int]  # min value, its step, max value, its step


def _merge(buckets: dict[int, Bucket], b: int, mn: float, smn: int, mx: float, smx: int) -> None:
    have = buckets.get(b)
    if have is None:
        buckets[b] = (mn, smn, mx, smx)
        return
    hmn, hsmn, hmx, hsmx = have
    if mn < hmn or (mn == hmn and smn < hsmn):
        hmn, hsmn = mn, smn
    if mx > hmx or (mx == hmx and smx < hsmx):
        hmx, hsmx = mx, smx
    buckets[b] = (hmn, hsmn, hmx, hsmx)


def bucket_width(first: int, last: int, buckets: int) -> int:
    """The smallest power of two W with at most `buckets` aligned buckets between steps first and last (>= 0)."""
    width = 1
    while last // width - first // width + 1 > buckets:
        width *= 2
    return width


def _aligned_from_points(session: Session, params: dict, width: int, lo: int, hi: int, out: dict[int, Bucket]) -> None:
    rows = session.execute(_ALIGNED, params={**params, "lo": lo, "hi": hi, "width": width}).all()
    for b, mn, smn, mx, smx in rows:
        if smn is not None and smx is not None:
            _merge(out, int(b), mn, int(smn), mx, int(smx))


def _aligned_buckets(session: Session, params: dict, first: int, last: int, width: int) -> dict[int, Bucket]:
    """Min/max per aligned bucket of `width` over the stored points in [first, last] of the requested range."""
    out: dict[int, Bucket] = {}
    tiers = [w for w in rollups.WIDTHS if w <= width]
    if not tiers:
        _aligned_from_points(session, params, width, first, last, out)
        return out
    tier = tiers[-1]
    lo_b, hi_b = first // width, last // width
    # Edge buckets reaching outside the requested range [lo, hi] hold points the answer must not include.
    if lo_b * width < params["lo"]:
        _aligned_from_points(session, params, width, first, min(last, (lo_b + 1) * width - 1), out)
        lo_b += 1
    if hi_b >= lo_b and (hi_b + 1) * width - 1 > params["hi"]:
        _aligned_from_points(session, params, width, max(first, hi_b * width), last, out)
        hi_b -= 1
    if hi_b >= lo_b:
        per = width // tier
        rows = session.execute(
            _TIER,
            params={
                "job_id": params["job_id"],
                "name": params["name"],
                "width": tier,
                "lo": lo_b * per,
                "hi": (hi_b + 1) * per - 1,
            },
        ).all()
        for b, mn, smn, mx, smx in rows:
            _merge(out, int(b) // per, mn, int(smn), mx, int(smx))
    return out


def _clean(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def series(
    session: Session,
    job_id: int,
    name: str,
    *,
    max_points: int,
    min_step: int | None = None,
    max_step: int | None = None,
) -> tuple[list[tuple[int, float | None]], bool]:
    """([(step, value), ...] sorted by step, whether it was downsampled). A downsampled series has
    B = max(1, (max_points - 2) // 2) buckets, so at most 2B + 2 points: <= max_points for max_points >= 4."""
    params = {
        "job_id": job_id,
        "name": name,
        "lo": -(2**62) if min_step is None else min_step,
        "hi": 2**62 if max_step is None else max_step,
    }
    count = session.execute(_CAPPED_COUNT, params={**params, "cap": max_points + 1}).one()[0]
    if not count:
        return [], False
    if count <= max_points:
        rows = session.execute(_ALL, params=params).all()
        return [(int(s), _clean(v)) for s, v in rows], False

    first_row = session.execute(_FIRST, params=params).one()
    last_row = session.execute(_LAST, params=params).one()
    first, last = int(first_row[0]), int(last_row[0])
    points: dict[int, float | None] = {first: _clean(first_row[1]), last: _clean(last_row[1])}
    buckets = max(1, (max_points - 2) // 2)
    if first >= 0:
        width = bucket_width(first, last, buckets)
        for mn, smn, mx, smx in _aligned_buckets(session, params, first, last, width).values():
            points[smn] = _clean(mn)
            points[smx] = _clean(mx)
        return sorted(points.items()), True

    span = last - first + 1
    if session.get_bind().dialect.name == "postgresql":
        # The planner cannot know there are only `buckets` groups: without these it sorts the series on disk
        # and JIT-compiles the query (seconds for a million points instead of a fraction).
        session.execute(text("SET LOCAL work_mem = '64MB'"))
        session.execute(text("SET LOCAL jit = off"))
    rows = session.execute(_BUCKETED, params={**params, "first": first, "buckets": buckets, "span": span}).all()
    for _bucket, mn, mx, step_mn, step_mx in rows:
        if step_mn is not None:
            points[int(step_mn)] = _clean(mn)
        if step_mx is not None:
            points[int(step_mx)] = _clean(mx)
    return sorted(points.items()), True
