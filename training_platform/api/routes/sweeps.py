"""Sweeps: one training job per grid point and seed, created together and summarised together.

`POST /sweeps {"name", "config", "grid": {"training.learning_rate": [1e-4, 3e-4]}, "seeds": [0, 1, 2]}`:
the base config and every generated config (grid values applied with `apply_overrides`, the seed set as
`training.seed`) are validated exactly like POST /jobs (schema, cross-field rules, path policy) before anything is
stored; then the sweep row and all its jobs are committed in one transaction and a worker is woken per job (the
jobs API's `_submit_all`). A problem anywhere is a 422 naming it: `grid.training.learning_rate[1]`, `seeds[2]`, or
the config field (named as POST /jobs names it).

`GET /sweeps/{id}`: the jobs with their status and the last value of each metric they logged (metric_points:
one index probe per job and series, never a scan of the points), and per grid point the mean and sample standard
deviation across seeds of each metric over the point's succeeded jobs (null std with fewer than two).

A job's grid point is read back from its stored config (the values at the grid's paths), so deleting a job of the
sweep leaves the others correctly grouped.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import statistics
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import func
from sqlmodel import Session, col, select

from training_platform.api import schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, not_found
from training_platform.api.jobspec import apply_overrides, check_job_config
from training_platform.api.routes import jobs as jobs_routes
from training_platform.core.errors import FieldError
from training_platform.core.overrides import OverrideError
from training_platform.core.settings import Settings
from training_platform.db import crud
from training_platform.db.models import TERMINAL, Job, JobStatus, MetricPoint, Sweep, User, row_id
from training_platform.training.config import ConfigError

log = logging.getLogger("training_platform.api.sweeps")

router = APIRouter(prefix="/sweeps", tags=["sweeps"])

SEED_KEY = "training.seed"
MAX_CONFIG_BYTES = 64 * 1024  # the base config as JSON (a real one is ~1 KB); every job stores a copy
MAX_VALUE_BYTES = 4096  # one grid value as JSON
MAX_ERRORS = 50  # problems reported by one 422
MAX_METRICS_PER_JOB = 200  # series summarised per job (a training run logs a few dozen)
JOB_NAME_MAX = 200
_KEY = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
# Short names in job names and point labels: `lr=0.0001 bs=8 seed=0`.
SHORT = {
    "learning_rate": "lr",
    "per_device_batch_size": "bs",
    "gradient_accumulation_steps": "ga",
    "weight_decay": "wd",
    "warmup_ratio": "warmup",
    "num_epochs": "epochs",
    "max_steps": "steps",
}
_MISSING = object()


# ---------------------------------------------------------------------------------------------- helpers


def _canon(value: Any) -> str:
    """A grid value's identity: 1 and 1.0 are one value (the same job for a float field)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        text = _canon(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _labels(keys: list[str]) -> dict[str, str]:
    """Grid key -> its short label: the last part (or its SHORT name), the whole key where two would clash."""
    short = {k: SHORT.get(k.rsplit(".", 1)[-1], k.rsplit(".", 1)[-1]) for k in keys}
    clashes = {s for s in short.values() if list(short.values()).count(s) > 1}
    return {k: (k if s in clashes else s) for k, s in short.items()}


def _label(labels: dict[str, str], point: dict[str, Any]) -> str:
    return " ".join(f"{labels.get(k, k)}={'?' if v is _MISSING else _fmt(v)}" for k, v in point.items())


def _as_path(key: str) -> str:
    """`rewards.0.weight` (an override key) -> `rewards[0].weight` (how config errors name it)."""
    out = ""
    for part in key.split("."):
        out += f"[{part}]" if part.isdigit() else (("." if out else "") + part)
    return out


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")


def _get(config: Any, key: str) -> Any:
    node = config
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _check_shape(body: schemas.SweepCreate, seeds: list[int]) -> list[tuple[str, str]]:
    """Bounds and consistency of the grid and seeds (the counts and sizes the schema cannot express)."""
    problems: list[tuple[str, str]] = []
    if _json_size(body.config) > MAX_CONFIG_BYTES:
        problems.append(("config", f"at most {MAX_CONFIG_BYTES // 1024} KiB as JSON"))
    keys = list(body.grid)
    for key, values in body.grid.items():
        where = f"grid.{key[:200]}"
        if not _KEY.match(key):
            problems.append(
                (
                    where,
                    "expected a dotted config path such as 'training.learning_rate' (letters, "
                    "digits, '_'; list items by index: 'rewards.0.weight')",
                )
            )
            continue
        if len(key.split(".")) > 16:
            problems.append((where, "at most 16 dotted parts"))
            continue
        if key == SEED_KEY:
            problems.append((where, "the seed is set by `seeds`, not by the grid"))
        for other in keys:
            if other != key and _under(_as_path(key), _as_path(other)):
                problems.append((where, f"overlaps the grid key {other!r} (one would overwrite the other)"))
        seen: dict[str, int] = {}
        for i, value in enumerate(values):
            if _json_size(value) > MAX_VALUE_BYTES:
                problems.append((f"{where}[{i}]", f"at most {MAX_VALUE_BYTES} bytes as JSON"))
                continue
            canon = _canon(value)
            if canon in seen:
                problems.append((f"{where}[{i}]", f"duplicate of value [{seen[canon]}]"))
            else:
                seen[canon] = i
    first: dict[int, int] = {}
    for i, seed in enumerate(seeds):
        if seed in first:
            problems.append((f"seeds[{i}]", f"duplicate of seeds[{first[seed]}]"))
        first.setdefault(seed, i)
    points = math.prod(len(v) for v in body.grid.values())
    if points * len(seeds) > schemas.SWEEP_MAX_JOBS:
        problems.append(
            (
                "grid",
                f"{points} grid points x {len(seeds)} seeds = {points * len(seeds)} jobs; at most "
                f"{schemas.SWEEP_MAX_JOBS} per sweep",
            )
        )
    return problems


def _config_errors(session: Session, raw: Any, settings: Settings, user: User) -> tuple[dict | None, list]:
    try:
        return check_job_config(session, raw, settings, user), []
    except ConfigError as exc:
        return None, list(exc.errors)


def _attribute(
    error: FieldError, keys: list[str], indexes: dict[str, int], seed_index: int, label: str
) -> tuple[str, str]:
    """A generated config's problem -> the request field that caused it."""
    for key in keys:
        path = _as_path(key)
        if _under(error.path, path):
            inner = "" if error.path == path else f"{error.path}: "
            return f"grid.{key}[{indexes[key]}]", inner + error.reason
    if _under(error.path, _as_path(SEED_KEY)):
        return f"seeds[{seed_index}]", error.reason
    return error.path, f"{error.reason} (with {label})"


def _generate(
    session: Session, body: schemas.SweepCreate, seeds: list[int], settings: Settings, user: User
) -> tuple[dict, list[dict]]:
    """Validate the base config and every generated one; returns (validated base, [(name, config)...]) or raises
    one 422 listing every problem."""
    base, base_errors = _config_errors(session, body.config, settings, user)
    problems: list[tuple[str, str]] = [(e.path, e.reason) for e in base_errors]
    known = {tuple(e) for e in base_errors}
    keys = list(body.grid)
    labels = _labels(keys)
    specs: list[dict] = []
    for combo in itertools.product(*(list(enumerate(body.grid[k])) for k in keys)):
        indexes = {k: i for k, (i, _) in zip(keys, combo, strict=True)}
        point = {k: v for k, (_, v) in zip(keys, combo, strict=True)}
        for seed_index, seed in enumerate(seeds):
            label = " ".join(filter(None, [_label(labels, point), f"seed={seed}"]))
            try:
                raw = apply_overrides(body.config, {**point, SEED_KEY: seed})
            except OverrideError as exc:
                where = f"grid.{exc.key}" if exc.key in body.grid else "seeds" if exc.key == SEED_KEY else "grid"
                problems.append((where, exc.reason))
                continue
            config, found = _config_errors(session, raw, settings, user)
            problems.extend(_attribute(e, keys, indexes, seed_index, label) for e in found if tuple(e) not in known)
            if config is not None:
                specs.append(
                    {"name": f"{body.name} {label}"[:JOB_NAME_MAX], "config": config, "priority": body.priority}
                )
    if problems:
        unique = list(dict.fromkeys(problems))
        if len(unique) > MAX_ERRORS:
            unique = [*unique[:MAX_ERRORS], ("grid", f"... and {len(unique) - MAX_ERRORS} more problems")]
        raise ValidationFailed(unique)
    assert base is not None
    return base, specs


def _visible_sweep(session: Session, user: User, sweep_id: int) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None or not (user.is_admin or sweep.owner_id == user.id):
        raise not_found(f"sweep {sweep_id}")
    return sweep


def _owner_name(session: Session, owner_id: int) -> str:
    owner = session.get(User, owner_id)
    return owner.name if owner is not None else f"#{owner_id}"


def _status_counts(session: Session, sweep_ids: list[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = {i: {} for i in sweep_ids}
    if sweep_ids:
        rows = session.exec(
            select(Job.sweep_id, Job.status, func.count())
            .where(col(Job.sweep_id).in_(sweep_ids))
            .group_by(col(Job.sweep_id), col(Job.status))
        ).all()
        for sweep_id, status_, n in rows:
            assert sweep_id is not None  # IN (...) never matches NULL
            counts[sweep_id][status_] = n
    return counts


def _sweep_read(sweep: Sweep, owner: str, counts: dict[str, int]) -> dict:
    return {
        "id": sweep.id,
        "name": sweep.name,
        "owner": owner,
        "grid": sweep.grid,
        "seeds": sweep.seeds,
        "created_at": sweep.created_at,
        "jobs_total": sum(counts.values()),
        "status_counts": counts,
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def last_values(session: Session, job_id: int) -> dict[str, float | None]:
    """The last logged value (highest step) of each of the job's series: one index probe per series
    (uq_metric_job_name_step), whatever the length of the run."""
    names = crud.metric_names(session, job_id)[:MAX_METRICS_PER_JOB]
    if not names:
        return {}
    probes = [
        select(MetricPoint.value)
        .where(MetricPoint.job_id == job_id, MetricPoint.name == name)
        .order_by(col(MetricPoint.step).desc())
        .limit(1)
        .scalar_subquery()
        for name in names
    ]
    out: dict[str, float | None] = {}
    for start in range(0, len(probes), 50):  # a bounded statement
        row = session.execute(select(*probes[start : start + 50])).one()
        out.update({name: _finite(value) for name, value in zip(names[start : start + 50], row, strict=True)})
    return out


def _stats(values: list[float]) -> dict:
    n = len(values)
    try:
        mean = math.fsum(values) / n
        std = statistics.stdev(values) if n >= 2 else None
    except (OverflowError, ValueError, statistics.StatisticsError):
        return {"mean": None, "std": None, "n": n}
    return {"mean": _finite(mean), "std": _finite(std), "n": n}


def sweep_detail(session: Session, sweep: Sweep, warning: str | None = None) -> dict:
    jobs = session.exec(select(Job).where(Job.sweep_id == sweep.id).order_by(col(Job.id))).all()
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    keys = list(sweep.grid)
    labels = _labels(keys)

    # The grid points in the order they were generated; a job's point is read from its config.
    points: dict[tuple, dict] = {}
    for combo in itertools.product(*(sweep.grid[k] for k in keys)):
        point = dict(zip(keys, combo, strict=True))
        points[tuple(_canon(v) for v in combo)] = {"point": point, "label": _label(labels, point), "jobs": []}
    job_items = []
    for job in jobs:
        values = [_get(job.config, k) for k in keys]
        ident = tuple("\0missing" if v is _MISSING else _canon(v) for v in values)
        if ident not in points:  # e.g. a registered model name replaced by its path
            point = dict(zip(keys, values, strict=True))
            points[ident] = {
                "point": {k: (None if v is _MISSING else v) for k, v in point.items()},
                "label": _label(labels, point),
                "jobs": [],
            }
        seed = _get(job.config, SEED_KEY)
        metrics = last_values(session, row_id(job))
        points[ident]["jobs"].append((job, metrics))
        job_items.append(
            {
                "id": job.id,
                "name": job.name,
                "status": job.status,
                "point": points[ident]["point"],
                "seed": seed if isinstance(seed, int) else None,
                "current_step": job.current_step,
                "max_steps": job.max_steps,
                "error": job.error,
                "metrics": metrics,
            }
        )

    point_items = []
    for entry in points.values():
        done = [metrics for job, metrics in entry["jobs"] if job.status == JobStatus.succeeded.value]
        names = sorted({name for metrics in done for name in metrics})
        stats = {}
        for name in names:
            values = [m[name] for m in done if m.get(name) is not None]
            if values:
                stats[name] = _stats(values)
        point_items.append(
            {
                "point": entry["point"],
                "label": entry["label"],
                "job_ids": [job.id for job, _ in entry["jobs"]],
                "succeeded": len(done),
                "metrics": stats,
            }
        )
    return {
        **_sweep_read(sweep, _owner_name(session, sweep.owner_id), counts),
        "config": sweep.config,
        "jobs": job_items,
        "points": point_items,
        "warning": warning,
    }


# ---------------------------------------------------------------------------------------------- endpoints


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.SweepDetail,
    dependencies=[JsonBody],
    responses={
        422: {
            "model": schemas.ValidationErrorOut,
            "description": "Every problem with the grid, the seeds or any generated config",
        }
    },
)
def create_sweep(body: schemas.SweepCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """One job per grid point and seed. Every generated config is validated like POST /jobs before anything is
    stored; the sweep and its jobs are then created in one transaction (all or none)."""
    seeds = body.seeds
    if seeds is None:
        seed = _get(body.config, SEED_KEY)
        seeds = [seed if isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32 else 42]
    problems = _check_shape(body, seeds)
    if problems:
        raise ValidationFailed(problems[:MAX_ERRORS])
    base, specs = _generate(session, body, seeds, settings, user)
    sweep = Sweep(owner_id=row_id(user), name=body.name, config=base, grid=body.grid, seeds=seeds)
    session.add(sweep)
    session.flush()
    for spec in specs:
        spec["sweep_id"] = sweep.id
    submitted = jobs_routes._submit_all(session, user, specs)  # commits the sweep with its jobs
    log.info("sweep %s (%r) by %s: %d jobs", sweep.id, sweep.name, user.name, len(submitted))
    warning = next((s["warning"] for s in submitted if s.get("warning")), None)
    return sweep_detail(session, sweep, warning=warning)


@router.get("", response_model=schemas.Page[schemas.SweepRead])
def list_sweeps(
    session: SessionDep,
    user: CurrentUser,
    q: Annotated[str | None, Query(max_length=200, description="Name contains (case-insensitive).")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    """Your sweeps, newest first (admins: everyone's)."""
    conditions = [] if user.is_admin else [col(Sweep.owner_id) == user.id]
    if q:
        conditions.append(func.lower(Sweep.name).contains(q.lower(), autoescape=True))
    total = session.exec(select(func.count()).select_from(Sweep).where(*conditions)).one()
    rows = session.exec(
        select(Sweep, User.name)
        .join(User, col(User.id) == Sweep.owner_id)
        .where(*conditions)
        .order_by(col(Sweep.created_at).desc(), col(Sweep.id).desc())
        .limit(limit)
        .offset(offset)
    ).all()
    counts = _status_counts(session, [row_id(s) for s, _ in rows])
    return {
        "items": [_sweep_read(s, owner, counts[row_id(s)]) for s, owner in rows],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


@router.get("/{sweep_id}", response_model=schemas.SweepDetail)
def get_sweep(sweep_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """The sweep's jobs (status, last value of each metric) and per grid point the mean and sample standard
    deviation across seeds of each metric's final value (succeeded jobs)."""
    return sweep_detail(session, _visible_sweep(session, user, sweep_id))


@router.post("/{sweep_id}/cancel", response_model=schemas.SweepDetail)
def cancel_sweep(sweep_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """Cancel every unfinished job of the sweep, each as POST /jobs/{id}/cancel does (queued: at once;
    preflight/running: the worker stops after a checkpoint). Finished jobs are left as they are."""
    sweep = _visible_sweep(session, user, sweep_id)
    unfinished = session.exec(
        select(Job)
        .where(Job.sweep_id == sweep.id, col(Job.status).not_in([s.value for s in TERMINAL]))
        .order_by(col(Job.id))
    ).all()
    for job in unfinished:
        try:
            jobs_routes.cancel_job(job, session, user)
        except HTTPException as exc:  # finished meanwhile, or still changing state: leave it
            session.rollback()
            log.info("sweep %s: job %s not cancelled: %s", sweep.id, job.id, exc.detail)
    log.info("sweep %s: cancel by %s (%d unfinished jobs)", sweep.id, user.name, len(unfinished))
    return sweep_detail(session, sweep)
