"""Usage accounting: device-hours, jobs and cost from the usage records (db/models.UsageRecord: one row per attempt of
a training job, from when it entered `running` until it left it), for `GET /usage` and a job's detail.

A record's device-seconds are devices x wall seconds; a report clips every record to its window (a record still
running counts up to min(now, until)), so the windows of a week add up to the week. Cost = device-hours x the price
of the record's device type (TP_DEVICE_HOUR_COST, e.g. `cuda=2.5,cpu=0.05`; a device without a price costs 0).
CPU seconds and peak memory are measured per attempt, not over time: a report sums (CPU) or takes the maximum
(memory) over the records it counts, unclipped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session, col, or_, select

from training_platform.core.errors import InvalidInput
from training_platform.core.settings import Settings, get_settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job, UsageRecord, User

log = logging.getLogger("training_platform.services.usage")

DEVICES = ("cuda", "cpu", "mps")
GROUP_BY = ("user", "job", "device")
MAX_WINDOW = timedelta(days=366)
DEFAULT_WINDOW = timedelta(days=7)
COST_SETTING = "TP_DEVICE_HOUR_COST"
DIGITS = 6  # floats are rounded to this many decimals in the output only


# ---------------------------------------------------------------------------------------------- prices


def parse_prices(text: str) -> dict[str, float]:
    """`cuda=2.5,cpu=0.05` -> {"cuda": 2.5, "cpu": 0.05}. Empty: no prices. Spaces around items and a trailing
    comma are allowed; an item without `=`, a device other than cuda|cpu|mps (lowercase), a price that is not a
    finite number >= 0, or a device named twice raises InvalidInput naming TP_DEVICE_HOUR_COST."""
    prices: dict[str, float] = {}
    problems: list[str] = []
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        name, sep, value = (s.strip() for s in item.partition("="))
        if not sep:
            problems.append(f"{item!r} is not DEVICE=PRICE")
            continue
        if name not in DEVICES:
            problems.append(f"unknown device {name!r} (one of {', '.join(DEVICES)})")
            continue
        if name in prices:
            problems.append(f"{name!r} is priced twice")
            continue
        try:
            price = float(value)
        except ValueError:
            problems.append(f"the price of {name} must be a number, got {value!r}")
            continue
        if not math.isfinite(price) or price < 0:
            problems.append(f"the price of {name} must be a finite number >= 0, got {value!r}")
            continue
        prices[name] = price
    if problems:
        raise InvalidInput([(COST_SETTING, f"{reason} (e.g. 'cuda=2.5,cpu=0.05')") for reason in problems])
    return prices


def device_hour_prices(settings: Settings | None = None) -> dict[str, float]:
    """The price of a device-hour per device type (TP_DEVICE_HOUR_COST); InvalidInput when it is malformed."""
    return parse_prices((settings or get_settings()).device_hour_cost)


# ---------------------------------------------------------------------------------------------- windows


def check_window(since: datetime, until: datetime, group_by: str = "user") -> None:
    """InvalidInput naming the field: `until` before `since`, a window over MAX_WINDOW (`since`), an unknown
    `group_by`. Both datetimes timezone-aware."""
    problems: list[tuple[str, str]] = []
    if until < since:
        problems.append(("until", f"must not be before since ({since.isoformat()}), got {until.isoformat()}"))
    elif until - since > MAX_WINDOW:
        problems.append(("since", f"the window must be at most {MAX_WINDOW.days} days, got {(until - since).days}"))
    if group_by not in GROUP_BY:
        problems.append(("group_by", f"must be one of {', '.join(GROUP_BY)}, got {group_by!r}"))
    if problems:
        raise InvalidInput(problems)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _clipped(
    record: UsageRecord, since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The record's interval inside [since, until] (either None: unbounded); a running record ends at `now`. The end
    is never before the start (a running record that starts after `now` is empty)."""
    start = _utc(record.started_at)
    end = _utc(record.ended_at) if record.ended_at is not None else now
    if since is not None:
        start = max(start, since)
    if until is not None:
        end = min(end, until)
    return start, max(start, end)


def _days(start: datetime, end: datetime) -> Iterable[tuple[str, float]]:
    """(UTC date, seconds) of [start, end) cut at UTC midnights."""
    while start < end:
        midnight = datetime(start.year, start.month, start.day, tzinfo=UTC)
        try:
            cut = min(end, midnight + timedelta(days=1))
        except OverflowError:  # the last day datetime can hold
            cut = end
        yield start.date().isoformat(), (cut - start).total_seconds()
        start = cut


# ---------------------------------------------------------------------------------------------- the report


@dataclass
class _Sums:
    device_seconds: float = 0.0
    cost: float = 0.0
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0
    jobs: set[int] = field(default_factory=set)

    def add(self, record: UsageRecord, device_seconds: float, price: float) -> None:
        self.device_seconds += device_seconds
        self.cost += device_seconds / 3600.0 * price
        self.cpu_seconds += max(0.0, record.cpu_seconds or 0.0)
        self.peak_memory_bytes = max(self.peak_memory_bytes, int(record.peak_memory_bytes or 0))
        self.jobs.add(record.job_id)

    def out(self) -> dict[str, Any]:
        return {
            "device_hours": round(self.device_seconds / 3600.0, DIGITS),
            "device_seconds": round(self.device_seconds, DIGITS),
            "jobs": len(self.jobs),
            "cost": round(self.cost, DIGITS),
            "cpu_hours": round(self.cpu_seconds / 3600.0, DIGITS),
            "peak_memory_bytes": self.peak_memory_bytes,
        }


def _records(
    session: Session, since: datetime, until: datetime, owner_id: int | None
) -> Sequence[tuple[UsageRecord, str | None, str | None]]:
    """The records overlapping [since, until] (started before `until`, not ended by `since`), with their owner's
    name and their job's name."""
    query = (
        select(UsageRecord, User.name, Job.name)
        .join(User, col(User.id) == col(UsageRecord.owner_id), isouter=True)
        .join(Job, col(Job.id) == col(UsageRecord.job_id), isouter=True)
        .where(
            col(UsageRecord.started_at) < until,
            or_(col(UsageRecord.ended_at).is_(None), col(UsageRecord.ended_at) > since),
        )
    )
    if owner_id is not None:
        query = query.where(UsageRecord.owner_id == owner_id)
    return session.exec(query.order_by(col(UsageRecord.id))).all()


def usage_report(
    session: Session,
    *,
    since: datetime,
    until: datetime,
    group_by: str = "user",
    owner_id: int | None = None,
    now: datetime | None = None,
    prices: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Device-hours, jobs and cost of the usage records overlapping [since, until] (owner_id None: everyone's),
    each clipped to the window (a running record counts up to min(now, until)), grouped by user, job or device.

    Returns `{"since", "until", "group_by", "prices", "rows", "total", "daily"}`: rows (most device-hours first) and
    total with `device_hours`, `device_seconds`, `jobs` (distinct), `cost`, `cpu_hours`, `peak_memory_bytes`, each row
    with its `key` and `user_id` + `user` (group_by user), `job_id` + `job_name` + `user` (job) or `device`
    (device); daily: `[{"date", "user", "user_id", "device_hours"}]`, each record's clipped interval split at UTC
    midnights. CPU hours and peak memory are the records' own (summed, maximum), NOT clipped to the window: they are
    measured per attempt. `prices` default to TP_DEVICE_HOUR_COST (InvalidInput when it is malformed)."""
    since, until = _utc(since), _utc(until)
    check_window(since, until, group_by)
    now = _utc(now) if now is not None else utcnow()
    if prices is None:
        prices = device_hour_prices()

    groups: dict[Any, _Sums] = {}
    labels: dict[Any, dict[str, Any]] = {}
    total = _Sums()
    daily: dict[tuple[str, int], float] = {}
    user_names: dict[int, str] = {}
    for record, user_name, job_name in _records(session, since, until, owner_id):
        raw_end = _utc(record.ended_at) if record.ended_at is not None else now
        if raw_end < _utc(record.started_at) or raw_end < since:
            continue  # ends before it starts, or runs now and the window lies after now: nothing of it inside
        start, end = _clipped(record, since, until, now)
        devices = max(0, record.devices or 0)
        seconds = devices * (end - start).total_seconds()
        price = prices.get(record.device, 0.0)
        user = user_name if user_name is not None else f"user {record.owner_id}"
        user_names[record.owner_id] = user
        key: Any
        if group_by == "user":
            key = record.owner_id
            labels.setdefault(key, {"key": user, "user_id": record.owner_id, "user": user})
        elif group_by == "job":
            key = record.job_id
            name = job_name if job_name is not None else f"job {record.job_id}"
            labels.setdefault(key, {"key": str(record.job_id), "job_id": record.job_id, "job_name": name, "user": user})
        else:
            key = record.device
            labels.setdefault(key, {"key": record.device, "device": record.device})
        groups.setdefault(key, _Sums()).add(record, seconds, price)
        total.add(record, seconds, price)
        for day, day_seconds in _days(start, end):
            daily[(day, record.owner_id)] = daily.get((day, record.owner_id), 0.0) + devices * day_seconds

    rows = [{**labels[key], **sums.out()} for key, sums in groups.items()]
    rows.sort(key=lambda row: (-row["device_hours"], row["key"]))
    days = [
        {"date": day, "user": user_names[uid], "user_id": uid, "device_hours": round(seconds / 3600.0, DIGITS)}
        for (day, uid), seconds in daily.items()
        if seconds > 0
    ]
    days.sort(key=lambda entry: (entry["date"], entry["user"], entry["user_id"]))
    return {
        "since": since,
        "until": until,
        "group_by": group_by,
        "prices": dict(prices),
        "rows": rows,
        "total": total.out(),
        "daily": days,
    }


# ---------------------------------------------------------------------------------------------- one job


def job_usage(
    session: Session, job_id: int, settings: Settings | None = None, now: datetime | None = None
) -> dict[str, Any] | None:
    """The job's usage over all its attempts: `{"device", "devices"` (of its latest attempt), `"device_seconds",
    "device_hours", "cpu_seconds", "peak_memory_bytes", "cost", "attempts"` (records), `"running"}` (an attempt is
    open); None when it has none. A malformed TP_DEVICE_HOUR_COST gives cost 0 (logged): a job's page does not
    fail over the operator's price list (GET /usage reports it)."""
    records = session.exec(
        select(UsageRecord)
        .where(UsageRecord.job_id == job_id)
        .order_by(col(UsageRecord.started_at), col(UsageRecord.id))
    ).all()
    if not records:
        return None
    try:
        prices = device_hour_prices(settings)
    except InvalidInput as exc:
        log.warning("job %s: no cost: %s", job_id, exc)
        prices = {}
    now = _utc(now) if now is not None else utcnow()
    device_seconds = cost = cpu_seconds = 0.0
    peak = 0
    for record in records:
        start, end = _clipped(record, None, None, now)
        seconds = max(0, record.devices or 0) * (end - start).total_seconds()
        device_seconds += seconds
        cost += seconds / 3600.0 * prices.get(record.device, 0.0)
        cpu_seconds += max(0.0, record.cpu_seconds or 0.0)
        peak = max(peak, int(record.peak_memory_bytes or 0))
    last = records[-1]
    return {
        "device": last.device,
        "devices": last.devices,
        "device_seconds": round(device_seconds, DIGITS),
        "device_hours": round(device_seconds / 3600.0, DIGITS),
        "cpu_seconds": round(cpu_seconds, DIGITS),
        "peak_memory_bytes": peak,
        "cost": round(cost, DIGITS),
        "attempts": len(records),
        "running": any(record.ended_at is None for record in records),
    }
