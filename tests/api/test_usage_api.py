"""GET /usage: device-hours, jobs and cost per user, job or device over a window. A user sees their own usage, an
admin everyone's (or one user's: `user_id`, admins only); the window and group_by are checked (422 naming the
field); the default window is the last 7 days. On SQLite and PostgreSQL (the `api` fixture)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import valid_config

from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.models import UsageRecord, User
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

H = timedelta(hours=1)
# A window of its own in the past: other tests' records (if any) fall outside it.
SINCE = datetime(2024, 6, 1, tzinfo=UTC)
UNTIL = datetime(2024, 6, 3, tzinfo=UTC)
WINDOW = {"since": SINCE.isoformat(), "until": UNTIL.isoformat()}


def _job_with_usage(api, owner: str, name: str, records: list[dict]) -> int:
    with session_scope() as s:
        job = crud.create_job(s, owner=s.get(User, api.user_ids[owner]), name=name, config=valid_config())
        for attempt, fields in enumerate(records, start=1):
            s.add(UsageRecord(job_id=job.id, owner_id=api.user_ids[owner], attempt=attempt, pool="node:t", **fields))
        return job.id


@pytest.fixture(scope="module")
def jobs(api) -> dict[str, int]:
    """alice: 2 cuda x 3 h (half of it inside the window) + 1 cpu x 4 h; bob: 1 cuda x 2 h."""
    return {
        "alice-gpu": _job_with_usage(
            api,
            "alice",
            "alice-gpu",
            [{"device": "cuda", "devices": 2, "started_at": SINCE - 3 * H, "ended_at": SINCE + 3 * H}],
        ),
        "alice-cpu": _job_with_usage(
            api,
            "alice",
            "alice-cpu",
            [{"device": "cpu", "devices": 1, "started_at": SINCE + H, "ended_at": SINCE + 5 * H, "cpu_seconds": 7200}],
        ),
        "bob-gpu": _job_with_usage(
            api,
            "bob",
            "bob-gpu",
            [{"device": "cuda", "devices": 1, "started_at": UNTIL - 2 * H, "ended_at": UNTIL + 8 * H}],
        ),
    }


def _ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def test_a_user_sees_only_their_own_usage(api, jobs):
    report = _ok(api.get("/usage", user="alice", params=WINDOW))
    assert [(row["key"], row["user"], row["device_hours"], row["jobs"]) for row in report["rows"]] == [
        ("alice", "alice", 10.0, 2)
    ]
    assert report["total"]["device_hours"] == 10.0 and report["total"]["cpu_hours"] == 2.0
    assert {day["user"] for day in report["daily"]} == {"alice"}
    by_job = _ok(api.get("/usage", user="bob", params={**WINDOW, "group_by": "job"}))
    assert [(row["job_id"], row["job_name"], row["device_hours"]) for row in by_job["rows"]] == [
        (jobs["bob-gpu"], "bob-gpu", 2.0)
    ]
    assert "device" not in by_job["rows"][0] and "user_id" not in by_job["rows"][0]
    # Their own id is fine; another user's is admin only.
    own = _ok(api.get("/usage", user="bob", params={**WINDOW, "user_id": api.user_ids["bob"]}))
    assert own["total"]["device_hours"] == 2.0
    r = api.get("/usage", user="bob", params={**WINDOW, "user_id": api.user_ids["alice"]})
    assert r.status_code == 403, r.text


def test_an_admin_sees_everyone_or_one_user(api, jobs):
    report = _ok(api.get("/usage", user="root", params=WINDOW))
    assert [(row["key"], row["user_id"], row["device_hours"]) for row in report["rows"]] == [
        ("alice", api.user_ids["alice"], 10.0),
        ("bob", api.user_ids["bob"], 2.0),
    ]
    assert report["total"] == {
        "device_hours": 12.0,
        "device_seconds": 12 * 3600.0,
        "jobs": 3,
        "cost": 0.0,
        "cpu_hours": 2.0,
        "peak_memory_bytes": 0,
    }
    assert report["daily"] == [
        {"date": "2024-06-01", "user": "alice", "user_id": api.user_ids["alice"], "device_hours": 10.0},
        {"date": "2024-06-02", "user": "bob", "user_id": api.user_ids["bob"], "device_hours": 2.0},
    ]
    by_device = _ok(api.get("/usage", user="root", params={**WINDOW, "group_by": "device"}))
    assert [(row["device"], row["device_hours"], row["jobs"]) for row in by_device["rows"]] == [
        ("cuda", 8.0, 2),
        ("cpu", 4.0, 1),
    ]
    bobs = _ok(api.get("/usage", user="root", params={**WINDOW, "user_id": api.user_ids["bob"]}))
    assert [row["key"] for row in bobs["rows"]] == ["bob"]


@pytest.mark.parametrize(
    "params, loc",
    [
        ({"since": UNTIL.isoformat(), "until": SINCE.isoformat()}, "query.until"),
        ({"since": (UNTIL - timedelta(days=367)).isoformat(), "until": UNTIL.isoformat()}, "query.since"),
        ({"until": "2024-01-01T00:00:00"}, None),  # the default `since` (7 days before) is fine
        ({"group_by": "team"}, "query.group_by"),
        ({"since": "yesterday"}, "query.since"),
    ],
)
def test_bad_windows_and_group_by_are_422_naming_the_field(api, params, loc):
    r = api.get("/usage", user="alice", params=params)
    if loc is None:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 422, r.text
    assert [item["loc"] for item in r.json()["detail"]] == [loc], r.json()


def test_defaults_the_last_7_days_grouped_by_user_timezone_naive_is_utc(api, jobs):
    job_id = _job_with_usage(
        api, "bob", "bob-now", [{"device": "cpu", "devices": 4, "started_at": utcnow() - 2 * H, "ended_at": None}]
    )
    before = utcnow()
    report = _ok(api.get("/usage", user="bob"))
    until = datetime.fromisoformat(report["until"])
    assert before <= until <= utcnow() and datetime.fromisoformat(report["since"]) == until - timedelta(days=7)
    assert report["group_by"] == "user"
    (row,) = report["rows"]
    assert row["key"] == "bob" and row["jobs"] == 1 and 8.0 <= row["device_hours"] < 8.1  # running: up to now

    naive = _ok(api.get("/usage", user="alice", params={"since": "2024-06-01T00:00:00", "until": "2024-06-03T00:00"}))
    assert datetime.fromisoformat(naive["since"]) == SINCE and datetime.fromisoformat(naive["until"]) == UNTIL
    assert naive["total"]["device_hours"] == 10.0
    assert api.get(f"/jobs/{job_id}", user="bob").status_code == 200


def test_the_price_list_gives_the_cost(api, jobs, monkeypatch):
    from training_platform.core.settings import get_settings

    monkeypatch.setenv("TP_DEVICE_HOUR_COST", "cuda=2.5,cpu=0.05")
    get_settings.cache_clear()
    try:
        report = _ok(api.get("/usage", user="root", params={**WINDOW, "group_by": "device"}))
        assert report["prices"] == {"cuda": 2.5, "cpu": 0.05}
        assert {row["device"]: row["cost"] for row in report["rows"]} == {"cuda": 20.0, "cpu": 0.2}
        assert report["total"]["cost"] == 20.2
        monkeypatch.setenv("TP_DEVICE_HOUR_COST", "gpu=1")
        get_settings.cache_clear()
        r = api.get("/usage", user="root", params=WINDOW)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "TP_DEVICE_HOUR_COST", r.text
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
