"""Per-user quotas: how many devices and jobs a user may hold at once, and device-hours per rolling week.

An admin sets them (`PUT /users/{id}/quota`); a user with none gets the settings' defaults (TP_QUOTA_*). The
concurrency limits make a job wait (services/scheduler.py says why); a spent weekly budget refuses a new job with
403 naming when it frees up. Nothing here stops a running job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, or_, select

from training_platform.core.errors import Forbidden
from training_platform.core.settings import Settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job, JobStatus, UsageRecord, User, UserQuota, row_id

WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Quota:
    max_devices: int | None = None
    max_running_jobs: int | None = None
    device_hours_per_week: float | None = None
    source: str = "default"  # "user": an admin set it; "default": the settings'


NO_LIMITS = Quota()


def default_quota(settings: Settings) -> Quota:
    return Quota(
        settings.quota_max_devices, settings.quota_max_running_jobs, settings.quota_device_hours_per_week, "default"
    )


def _from_row(row: UserQuota) -> Quota:
    return Quota(row.max_devices, row.max_running_jobs, row.device_hours_per_week, "user")


def quotas_for(session: Session, user_ids: Iterable[int], settings: Settings) -> dict[int, Quota]:
    ids = set(user_ids)
    if not ids:
        return {}
    rows = {r.user_id: _from_row(r) for r in session.exec(select(UserQuota).where(col(UserQuota.user_id).in_(ids)))}
    default = default_quota(settings)
    return {uid: rows.get(uid, default) for uid in ids}


def set_quota(
    session: Session, user: User, admin: User, *, max_devices, max_running_jobs, device_hours_per_week
) -> None:
    row = session.get(UserQuota, row_id(user)) or UserQuota(user_id=row_id(user))
    row.max_devices, row.max_running_jobs = max_devices, max_running_jobs
    row.device_hours_per_week = device_hours_per_week
    row.updated_by, row.updated_at = row_id(admin), utcnow()
    session.add(row)
    session.flush()


# ---------------------------------------------------------------------------------------------- use


def _aware(ts: datetime) -> datetime:
    from datetime import UTC

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


Interval = tuple[int, int, datetime, datetime | None]  # owner, devices, start, end (None: running)


def _intervals(session: Session, user_ids: set[int], since: datetime) -> list[Interval]:
    rows = session.exec(
        select(UsageRecord.owner_id, UsageRecord.devices, UsageRecord.started_at, UsageRecord.ended_at).where(
            col(UsageRecord.owner_id).in_(user_ids),
            or_(col(UsageRecord.ended_at).is_(None), col(UsageRecord.ended_at) > since),
        )
    ).all()
    return [(o, n, _aware(s), _aware(e) if e is not None else None) for o, n, s, e in rows]


def _seconds_in(devices: int, start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    return devices * max(0.0, (min(end, hi) - max(start, lo)).total_seconds())


def week_device_seconds(session: Session, user_ids: Iterable[int], *, now: datetime | None = None) -> dict[int, float]:
    """Device-seconds each user used in the rolling week up to `now` (running attempts count up to now)."""
    ids = set(user_ids)
    if not ids:
        return {}
    now = now or utcnow()
    since = now - WEEK
    used = dict.fromkeys(ids, 0.0)
    for owner, devices, start, end in _intervals(session, ids, since):
        used[owner] += _seconds_in(devices, start, end or now, since, now)
    return used


def frees_up_at(session: Session, user_id: int, limit_hours: float, *, now: datetime | None = None) -> datetime | None:
    """When the rolling week's use drops below `limit_hours` if the user's running jobs stopped now: the week's
    window slides past old use. None when it is below already."""
    now = now or utcnow()
    if limit_hours <= 0:  # a budget of nothing never frees up
        return None
    spans = [(n, s, e or now) for _, n, s, e in _intervals(session, {user_id}, now - WEEK)]

    def used_at(t: datetime) -> float:
        return sum(_seconds_in(n, s, e, t - WEEK, now) for n, s, e in spans) / 3600

    if used_at(now) < limit_hours:
        return None
    lo, hi = now, now + WEEK  # used_at(now + WEEK) == 0
    for _ in range(40):
        mid = lo + (hi - lo) / 2
        lo, hi = (mid, hi) if used_at(mid) >= limit_hours else (lo, mid)
    return hi.replace(microsecond=0) + timedelta(seconds=1)


def holding(session: Session, user_id: int) -> tuple[int, int]:
    """(devices, jobs) the user's training jobs hold now (preflight or running)."""
    rows = session.exec(
        select(Job.devices).where(
            Job.owner_id == user_id,
            Job.kind == "train",
            col(Job.status).in_((JobStatus.preflight.value, JobStatus.running.value)),
        )
    ).all()
    return sum(n or 0 for n in rows), len(rows)


# ---------------------------------------------------------------------------------------------- the rules


def concurrency_block(quota: Quota, owner: str, *, running_devices: int, running_jobs: int, asks: int) -> str | None:
    """Why a job of `owner` asking `asks` devices must wait for their running jobs, or None."""
    if quota.max_devices is not None:
        if asks > quota.max_devices:
            return f"quota: the job asks {asks} devices, {owner} may use at most {quota.max_devices}"
        if running_devices + asks > quota.max_devices:
            return f"quota: {owner} runs {running_devices} of {quota.max_devices} devices"
    if quota.max_running_jobs is not None and running_jobs + 1 > quota.max_running_jobs:
        return f"quota: {owner} runs {running_jobs} of {quota.max_running_jobs} jobs"
    return None


def budget_block(quota: Quota, owner: str, week_seconds: float) -> str | None:
    if quota.device_hours_per_week is None:
        return None
    used = week_seconds / 3600
    if used >= quota.device_hours_per_week:
        return f"quota: {owner} used {used:.2f} of {quota.device_hours_per_week:g} device-hours this week"
    return None


def check_submit(session: Session, user: User, settings: Settings) -> None:
    """A new job of `user`: Forbidden (403) when their weekly device-hours are spent, naming when they free up."""
    quota = quotas_for(session, [row_id(user)], settings)[row_id(user)]
    if quota.device_hours_per_week is None:
        return
    now = utcnow()
    used = week_device_seconds(session, [row_id(user)], now=now)[row_id(user)]
    block = budget_block(quota, user.name, used)
    if block is None:
        return
    when = frees_up_at(session, row_id(user), quota.device_hours_per_week, now=now)
    after = f"; it frees up at {when.isoformat()}" if when else "; an admin must raise it"
    raise Forbidden(
        [("quota.device_hours_per_week", f"{block} (rolling 7 days){after}")],
        message=f"{block.removeprefix('quota: ')} (quota device_hours_per_week, rolling 7 days){after}",
    )


def quota_view(session: Session, user: User, settings: Settings) -> dict[str, Any]:
    """GET /users/{id}/quota: the limits, where they come from, and what the user holds and used."""
    uid = row_id(user)
    quota = quotas_for(session, [uid], settings)[uid]
    now = utcnow()
    devices, jobs = holding(session, uid)
    used_hours = week_device_seconds(session, [uid], now=now)[uid] / 3600
    frees = (
        frees_up_at(session, uid, quota.device_hours_per_week, now=now)
        if quota.device_hours_per_week is not None
        else None
    )
    return {
        "user_id": uid,
        "user": user.name,
        "max_devices": quota.max_devices,
        "max_running_jobs": quota.max_running_jobs,
        "device_hours_per_week": quota.device_hours_per_week,
        "source": quota.source,
        "used": {"devices": devices, "running_jobs": jobs, "device_hours_week": round(used_hours, 6)},
        "week_frees_up_at": frees,
    }
