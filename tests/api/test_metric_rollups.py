"""Rollup tiers (db/rollups.py) stay exact under every write path, and the downsampled series answers from them:
checked against a brute-force computation in Python, on SQLite and PostgreSQL (the `api` fixture)."""

from __future__ import annotations

import random

import pytest
from api_helpers import valid_config
from sqlalchemy import text

from training_platform.api.downsample import bucket_width
from training_platform.db import crud, rollups
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration


def _job(api) -> int:
    r = api.post("/jobs", json={"name": "rollups", "config": valid_config()})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _expected(points: dict[tuple[str, int], float]) -> set[tuple]:
    """(name, width, bucket, min, first step of min, max, first step of max) for every tier, by brute force."""
    out = {}
    for (name, step), value in sorted(points.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if step < 0:
            continue
        for width in rollups.WIDTHS:
            key = (name, width, step // width)
            mn, smn, mx, smx = out.get(key, (value, step, value, step))
            if value < mn:
                mn, smn = value, step
            if value > mx:
                mx, smx = value, step
            out[key] = (mn, smn, mx, smx)
    return {(*k, *v) for k, v in out.items()}


def _stored(job_id: int) -> set[tuple]:
    with session_scope() as s:
        rows = s.execute(
            text(
                "SELECT name, width, bucket, min_value, min_step, max_value, max_step "
                "FROM metric_rollups WHERE job_id = :j"
            ),
            {"j": job_id},
        ).all()
    return {tuple(r) for r in rows}


def test_rollups_follow_inserts_duplicates_and_truncation(api):
    rng = random.Random(7)
    job_id = _job(api)
    truth: dict[tuple[str, int], float] = {}
    step = 0
    # Batches as the ingest writes them: a few steps, several names, values with ties (rounded).
    for _ in range(60):
        batch = []
        for _ in range(rng.randint(1, 400)):
            step += rng.choice((1, 1, 1, 7, 300))
            for name in ("loss", "lr") if step % 3 else ("loss", "lr", "eval/acc"):
                batch.append((step, name, round(rng.gauss(0, 1), 1)))
        with session_scope() as s:
            crud.add_metric_points(s, job_id, batch)
        for st, name, value in batch:
            truth.setdefault((name, st), value)
    assert _stored(job_id) == _expected(truth)

    # A re-ingested point with another value is ignored by the points table: the rollups too.
    (name, st), value = next(iter(truth.items()))
    with session_scope() as s:
        crud.add_metric_points(s, job_id, [(st, name, value + 1000.0)])
    assert _stored(job_id) == _expected(truth)

    # Resume from a checkpoint: the points after it go, and so do their extremes.
    cut = step // 2
    with session_scope() as s:
        crud.delete_metrics_after(s, job_id, cut)
    truth = {k: v for k, v in truth.items() if k[1] <= cut}
    assert _stored(job_id) == _expected(truth)

    # A full rebuild gives the same rows; a fresh start (-1) drops them all.
    with session_scope() as s:
        rollups.rebuild(s, job_id)
    assert _stored(job_id) == _expected(truth)
    with session_scope() as s:
        crud.delete_metrics_after(s, job_id, -1)
    assert _stored(job_id) == set()


def test_downsampled_series_keeps_every_aligned_bucket_extreme(api):
    rng = random.Random(11)
    job_id = _job(api)
    truth = {}
    step = 3
    while len(truth) < 40_000:
        step += rng.choice((1, 2, 5))
        truth[step] = round(rng.gauss(0, 1), 2)
    rows = [(s, "loss", v) for s, v in truth.items()]
    with session_scope() as s:
        for i in range(0, len(rows), 10_000):
            crud.add_metric_points(s, job_id, rows[i : i + 10_000])
        assert crud.metric_names(s, job_id) == ["loss"]

    for max_points, lo, hi in (
        (1000, None, None),
        (300, None, None),
        (2, None, None),
        (10_000, None, None),
        (500, 12_345, 67_891),
        (100, 1000, 1500),
        (40, 50_000, None),
    ):
        params = {"names": "loss", "max_points": max_points}
        if lo is not None:
            params["min_step"] = lo
        if hi is not None:
            params["max_step"] = hi
        r = api.get(f"/jobs/{job_id}/metrics", params=params)
        assert r.status_code == 200, r.text
        got = r.json()["series"]["loss"]
        window = {s: v for s, v in truth.items() if (lo is None or s >= lo) and (hi is None or s <= hi)}
        assert len(got) <= max(max_points, 4)
        assert all(window[s] == v for s, v in got), "every point is a stored point of the window"
        steps = [s for s, _ in got]
        assert steps == sorted(set(steps)) and steps[0] == min(window) and steps[-1] == max(window)
        if len(window) <= max_points:
            assert len(got) == len(window)
            continue
        width = bucket_width(min(window), max(window), max(1, (max_points - 2) // 2))
        per: dict[int, list[int]] = {}
        for s in sorted(window):
            per.setdefault(s // width, []).append(s)
        for b, members in per.items():
            mn_step = min(members, key=lambda s: (window[s], s))
            mx_step = min(members, key=lambda s: (-window[s], s))
            assert mn_step in steps and mx_step in steps, (max_points, lo, hi, b)
