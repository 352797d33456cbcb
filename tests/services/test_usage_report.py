"""Usage accounting (training_platform.services.usage): records clipped to the window, a running record, the daily
split at UTC midnight, prices (TP_DEVICE_HOUR_COST), grouping by user, job and device, a job's own usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session, SQLModel, create_engine

from training_platform.core.errors import InvalidInput
from training_platform.core.settings import Settings
from training_platform.db import crud
from training_platform.db.models import UsageRecord
from training_platform.services import usage

pytestmark = pytest.mark.unit

SINCE = datetime(2025, 3, 10, tzinfo=UTC)
UNTIL = datetime(2025, 3, 12, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def db(tmp_path):
    """A SQLite database with the platform's tables, users ann (id 1) and ben (id 2), and ann's jobs a1, a2 and ben's
    job b1; yields (session, {name: id})."""
    engine = create_engine(f"sqlite:///{tmp_path / 'usage.db'}")
    SQLModel.metadata.create_all(engine)
    with Session(engine, expire_on_commit=False) as session:
        ann, _ = crud.create_user(session, "ann")
        ben, _ = crud.create_user(session, "ben")
        ids = {"ann": ann.id, "ben": ben.id}
        for name, owner in (("a1", ann), ("a2", ann), ("b1", ben)):
            ids[name] = crud.create_job(session, owner=owner, name=name, config={"algorithm": {"name": "sft"}}).id
        session.commit()
        yield session, ids
    engine.dispose()


def _record(session, job_id, owner_id, start, end=None, *, device="cuda", devices=1, attempt=1, cpu=0.0, peak=0):
    session.add(
        UsageRecord(
            job_id=job_id,
            owner_id=owner_id,
            attempt=attempt,
            pool="node:test",
            device=device,
            devices=devices,
            started_at=start,
            ended_at=end,
            cpu_seconds=cpu,
            peak_memory_bytes=peak,
        )
    )
    session.commit()


def _report(session, group_by="user", owner_id=None, now=UNTIL + 10 * H, prices=None, since=SINCE, until=UNTIL):
    return usage.usage_report(
        session, since=since, until=until, group_by=group_by, owner_id=owner_id, now=now, prices=prices or {}
    )


def test_records_are_clipped_to_the_window_and_outside_ones_ignored(db):
    session, ids = db
    # 1 h before the window to 2 h into it, 2 devices: 4 device-hours inside.
    _record(session, ids["a1"], ids["ann"], SINCE - H, SINCE + 2 * H, devices=2)
    # 3 h before the end to 5 h after it: 3 inside.
    _record(session, ids["a2"], ids["ann"], UNTIL - 3 * H, UNTIL + 5 * H)
    # Outside: ends exactly at `since`, starts exactly at `until`, all before.
    _record(session, ids["b1"], ids["ben"], SINCE - 5 * H, SINCE)
    _record(session, ids["b1"], ids["ben"], UNTIL, UNTIL + H)
    _record(session, ids["b1"], ids["ben"], SINCE - 9 * H, SINCE - 8 * H)
    report = _report(session)
    assert [row["key"] for row in report["rows"]] == ["ann"]
    (row,) = report["rows"]
    assert row["device_hours"] == 7.0 and row["device_seconds"] == 7 * 3600.0 and row["jobs"] == 2
    assert row["user_id"] == ids["ann"] and row["user"] == "ann"
    assert report["total"]["device_hours"] == 7.0 and report["total"]["jobs"] == 2
    assert report["since"] == SINCE and report["until"] == UNTIL and report["group_by"] == "user"


def test_a_running_record_counts_up_to_now_or_the_end_of_the_window(db):
    session, ids = db
    _record(session, ids["a1"], ids["ann"], UNTIL - 4 * H, None, devices=3)
    assert _report(session, now=UNTIL - H)["total"]["device_hours"] == 9.0  # 3 h so far x 3 devices
    assert _report(session, now=UNTIL + 50 * H)["total"]["device_hours"] == 12.0  # up to `until`
    # A window after now: nothing of the running record is in it.
    later = _report(session, now=UNTIL - H, since=UNTIL, until=UNTIL + 24 * H)
    assert later["rows"] == [] and later["total"]["jobs"] == 0
    # It started this instant: a job, no hours yet.
    just_started = _report(session, now=UNTIL - 4 * H)["total"]
    assert just_started["jobs"] == 1 and just_started["device_hours"] == 0.0


def test_daily_split_at_utc_midnight_per_user(db):
    session, ids = db
    midnight = SINCE + 24 * H  # 2025-03-11 00:00 UTC
    _record(session, ids["a1"], ids["ann"], midnight - 2 * H, midnight + 3 * H, devices=2)
    _record(session, ids["b1"], ids["ben"], midnight + 5 * H, midnight + 6 * H)
    # Starts before the window: only its part inside counts on the window's first day.
    _record(session, ids["a2"], ids["ann"], SINCE - 3 * H, SINCE + H, device="cpu")
    report = _report(session)
    assert report["daily"] == [
        {"date": "2025-03-10", "user": "ann", "user_id": ids["ann"], "device_hours": 5.0},
        {"date": "2025-03-11", "user": "ann", "user_id": ids["ann"], "device_hours": 6.0},
        {"date": "2025-03-11", "user": "ben", "user_id": ids["ben"], "device_hours": 1.0},
    ]
    assert sum(day["device_hours"] for day in report["daily"]) == report["total"]["device_hours"] == 12.0


def test_cost_is_device_hours_times_the_price_of_the_device(db):
    session, ids = db
    _record(session, ids["a1"], ids["ann"], SINCE, SINCE + 2 * H, device="cuda", devices=4)  # 8 cuda hours
    _record(session, ids["b1"], ids["ben"], SINCE, SINCE + 10 * H, device="cpu")  # 10 cpu hours
    _record(session, ids["b1"], ids["ben"], SINCE, SINCE + H, device="mps", attempt=2)  # no price: 0
    prices = usage.parse_prices("cuda=2.5, cpu=0.05")
    report = _report(session, group_by="device", prices=prices)
    assert report["prices"] == {"cuda": 2.5, "cpu": 0.05}
    by_device = {row["key"]: row for row in report["rows"]}
    assert by_device["cuda"]["cost"] == 20.0 and by_device["cpu"]["cost"] == 0.5 and by_device["mps"]["cost"] == 0.0
    assert report["total"]["cost"] == 20.5
    assert [row["device"] for row in report["rows"]] == ["cpu", "cuda", "mps"]  # most device-hours first
    assert "user" not in report["rows"][0] and "job_id" not in report["rows"][0]


def test_group_by_user_job_device_and_the_owner_filter(db):
    session, ids = db
    gib = 2**30
    _record(session, ids["a1"], ids["ann"], SINCE, SINCE + H, cpu=1800.0, peak=2 * gib)
    _record(session, ids["a1"], ids["ann"], SINCE + 2 * H, SINCE + 4 * H, attempt=2, cpu=3600.0, peak=gib)
    _record(session, ids["a2"], ids["ann"], SINCE, SINCE + 5 * H, device="cpu", devices=2)
    _record(session, ids["b1"], ids["ben"], SINCE, SINCE + 4 * H)

    by_user = _report(session, "user")["rows"]
    assert [(r["key"], r["device_hours"], r["jobs"]) for r in by_user] == [("ann", 13.0, 2), ("ben", 4.0, 1)]
    assert by_user[0]["cpu_hours"] == 1.5 and by_user[0]["peak_memory_bytes"] == 2 * gib

    by_job = _report(session, "job")["rows"]
    assert [(r["job_name"], r["device_hours"], r["jobs"]) for r in by_job] == [
        ("a2", 10.0, 1),
        ("b1", 4.0, 1),
        ("a1", 3.0, 1),
    ]
    assert by_job[2] == {
        "key": str(ids["a1"]),
        "job_id": ids["a1"],
        "job_name": "a1",
        "user": "ann",
        "device_hours": 3.0,
        "device_seconds": 10800.0,
        "jobs": 1,
        "cost": 0.0,
        "cpu_hours": 1.5,
        "peak_memory_bytes": 2 * gib,
    }

    by_device = _report(session, "device")["rows"]
    assert [(r["key"], r["device_hours"], r["jobs"]) for r in by_device] == [("cpu", 10.0, 1), ("cuda", 7.0, 2)]

    bens = _report(session, "job", owner_id=ids["ben"])
    assert [r["job_name"] for r in bens["rows"]] == ["b1"] and bens["total"]["device_hours"] == 4.0
    assert {day["user"] for day in bens["daily"]} == {"ben"}
    assert _report(session, owner_id=999)["rows"] == []


def test_the_window_and_group_by_are_checked_naming_the_field(db):
    session, _ = db
    with pytest.raises(InvalidInput) as until_first:
        _report(session, since=UNTIL, until=SINCE)
    assert [e.path for e in until_first.value.errors] == ["until"]
    with pytest.raises(InvalidInput) as too_long:
        _report(session, since=SINCE - timedelta(days=367), until=SINCE)
    assert [e.path for e in too_long.value.errors] == ["since"]
    _report(session, since=SINCE - timedelta(days=366), until=SINCE)  # 366 days is allowed
    with pytest.raises(InvalidInput) as group:
        _report(session, group_by="team")
    assert [e.path for e in group.value.errors] == ["group_by"]
    # Timezone-naive datetimes are UTC.
    naive = _report(session, since=SINCE.replace(tzinfo=None), until=UNTIL.replace(tzinfo=None))
    assert naive["since"] == SINCE and naive["until"] == UNTIL


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {}),
        ("cuda=2.5,cpu=0.05", {"cuda": 2.5, "cpu": 0.05}),
        (" cuda = 2 , mps=0 ,", {"cuda": 2.0, "mps": 0.0}),
    ],
)
def test_prices_parse(text, expected):
    assert usage.device_hour_prices(Settings(TP_DEVICE_HOUR_COST=text)) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("cuda", "is not DEVICE=PRICE"),
        ("cuda=", "must be a number"),
        ("cuda=abc", "must be a number"),
        ("cuda=-1", "finite number >= 0"),
        ("cuda=nan", "finite number >= 0"),
        ("cuda=inf", "finite number >= 0"),
        ("gpu=1", "unknown device 'gpu'"),
        ("CUDA=1", "unknown device 'CUDA'"),
        ("cuda=1,cuda=2", "priced twice"),
    ],
)
def test_a_malformed_price_list_is_refused_naming_the_setting(text, reason):
    with pytest.raises(InvalidInput) as exc:
        usage.device_hour_prices(Settings(TP_DEVICE_HOUR_COST=text))
    (error,) = exc.value.errors
    assert error.path == "TP_DEVICE_HOUR_COST" and reason in error.reason, error


def test_usage_report_reads_the_prices_from_the_settings(db, monkeypatch):
    from training_platform.core import settings

    session, ids = db
    _record(session, ids["a1"], ids["ann"], SINCE, SINCE + 2 * H)
    monkeypatch.setenv("TP_DEVICE_HOUR_COST", "cuda=3")
    settings.get_settings.cache_clear()
    try:
        report = usage.usage_report(session, since=SINCE, until=UNTIL, group_by="user", owner_id=None, now=UNTIL)
        assert report["prices"] == {"cuda": 3.0} and report["total"]["cost"] == 6.0
        monkeypatch.setenv("TP_DEVICE_HOUR_COST", "cuda=x")
        settings.get_settings.cache_clear()
        with pytest.raises(InvalidInput):
            usage.usage_report(session, since=SINCE, until=UNTIL, group_by="user", owner_id=None, now=UNTIL)
    finally:
        monkeypatch.undo()
        settings.get_settings.cache_clear()


def test_job_usage_over_every_attempt(db):
    session, ids = db
    assert usage.job_usage(session, ids["a1"]) is None
    _record(session, ids["a1"], ids["ann"], SINCE, SINCE + 2 * H, device="cpu", devices=1, cpu=100.0, peak=10)
    _record(session, ids["a1"], ids["ann"], SINCE + 3 * H, None, devices=2, attempt=2, cpu=50.0, peak=30)
    settings = Settings(TP_DEVICE_HOUR_COST="cuda=2.5,cpu=0.5")
    job = usage.job_usage(session, ids["a1"], settings, now=SINCE + 4 * H)
    assert job == {
        "device": "cuda",
        "devices": 2,
        "device_seconds": 4 * 3600.0,
        "device_hours": 4.0,
        "cpu_seconds": 150.0,
        "peak_memory_bytes": 30,
        "cost": 2 * 0.5 + 2 * 2.5,
        "attempts": 2,
        "running": True,
    }
    # A malformed price list does not break a job's page: no cost.
    broken = usage.job_usage(session, ids["a1"], Settings(TP_DEVICE_HOUR_COST="cuda=?"), now=SINCE + 4 * H)
    assert broken is not None and broken["cost"] == 0.0 and broken["device_hours"] == 4.0
