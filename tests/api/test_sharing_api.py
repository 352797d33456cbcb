"""Sharing the devices on a real database (SQLite and PostgreSQL): quotas over the API (who may read and set them,
bad values), the 403 of a spent weekly budget naming when it frees up, the queue's position and reason on the
jobs API, claims that never hand out more devices than a node has (racing processes), usage records opened and
closed by the state machine, and migration 0010."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from api_helpers import database, set_status, transition, valid_config
from sqlalchemy import text
from sqlmodel import SQLModel, col, select

from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.migrate import alembic_config, upgrade
from training_platform.db.models import Job, JobStatus, UsageRecord, UserQuota
from training_platform.db.session import make_engine, session_scope
from training_platform.services import scheduler

pytestmark = pytest.mark.integration

NO_LIMITS = {"max_devices": None, "max_running_jobs": None, "device_hours_per_week": None}


def _user(api, prefix: str, admin: bool = False) -> str:
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    with session_scope() as s:
        user, token = crud.create_user(s, name, is_admin=admin)
        api.tokens[name], api.user_ids[name] = token, user.id
    return name


def _submit(api, user: str, **resources) -> dict:
    config = valid_config(resources={"device": "cpu", **resources}) if resources else valid_config()
    r = api.post("/jobs", user=user, json={"name": "share", "config": config})
    assert r.status_code == 201, r.text
    return r.json()


def _clear_queue() -> None:
    """Other tests of the module leave queued and running jobs: out of the way of the scheduler's tests."""
    with session_scope() as s:
        rows = s.exec(select(Job).where(col(Job.status).in_(["queued", "preflight", "running"]))).all()
        ids = [j.id for j in rows]
    for job_id in ids:
        with session_scope() as s:
            job = s.get(Job, job_id)
            from training_platform.services.jobs import transition

            transition(s, job, JobStatus.cancelled, "test: clear the queue")


# ---------------------------------------------------------------------------------------------- quotas


def test_quota_defaults_set_read_and_who_may(api):
    bob = _user(api, "qb")
    bob_id = api.user_ids[bob]
    r = api.get(f"/users/{bob_id}/quota", user=bob)
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in NO_LIMITS} == NO_LIMITS and r.json()["source"] == "default"
    assert r.json()["used"] == {"devices": 0, "running_jobs": 0, "device_hours_week": 0.0}
    body = {"max_devices": 1, "max_running_jobs": None, "device_hours_per_week": 12.5}
    r = api.put(f"/users/{bob_id}/quota", user="root", json=body)
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in body} == body and r.json()["source"] == "user" and r.json()["user"] == bob
    assert api.get(f"/users/{bob_id}/quota", user=bob).json()["max_devices"] == 1
    assert api.get(f"/users/{bob_id}/quota", user="root").status_code == 200
    # others: 404 to read another's (as for any object of another user), 403 to set any (their own included)
    assert api.get(f"/users/{bob_id}/quota", user="alice").status_code == 404
    assert api.put(f"/users/{bob_id}/quota", user=bob, json=NO_LIMITS).status_code == 403
    assert api.put(f"/users/{api.user_ids['alice']}/quota", user="alice", json=NO_LIMITS).status_code == 403
    assert api.put("/users/987654/quota", user="root", json=NO_LIMITS).status_code == 404
    # null = no limit, set explicitly
    r = api.put(f"/users/{bob_id}/quota", user="root", json=NO_LIMITS)
    assert {k: r.json()[k] for k in NO_LIMITS} == NO_LIMITS and r.json()["source"] == "user"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_devices": -1, "max_running_jobs": None, "device_hours_per_week": None}, "max_devices"),
        ({"max_devices": None, "max_running_jobs": 10**9, "device_hours_per_week": None}, "max_running_jobs"),
        ({"max_devices": None, "max_running_jobs": None, "device_hours_per_week": -0.5}, "device_hours_per_week"),
        ({"max_devices": None, "max_running_jobs": None, "device_hours_per_week": 1e12}, "device_hours_per_week"),
        ({"max_devices": "many", "max_running_jobs": None, "device_hours_per_week": None}, "max_devices"),
        ({"max_devices": None, "max_running_jobs": None}, "device_hours_per_week"),
        ({**NO_LIMITS, "max_gpus": 3}, "max_gpus"),
    ],
)
def test_bad_quota_values_are_422_naming_the_field(api, body, field):
    r = api.put(f"/users/{api.user_ids['bob']}/quota", user="root", json=body)
    assert r.status_code == 422, r.text
    assert any(item["loc"].endswith(field) for item in r.json()["detail"]), r.json()


def test_a_spent_weekly_budget_refuses_new_jobs_with_403_naming_when_it_frees_up(api):
    carol = _user(api, "qc")
    carol_id = api.user_ids[carol]
    job = _submit(api, carol)
    set_status(job["id"], "cancelled")
    now = utcnow()
    with session_scope() as s:  # 2 devices for one hour, ended 2 days ago: 2 device-hours this week
        s.add(
            UsageRecord(
                job_id=job["id"],
                owner_id=carol_id,
                devices=2,
                started_at=now - timedelta(days=2, hours=1),
                ended_at=now - timedelta(days=2),
            )
        )
    body = {"max_devices": None, "max_running_jobs": None, "device_hours_per_week": 1.5}
    assert api.put(f"/users/{carol_id}/quota", user="root", json=body).status_code == 200
    r = api.post("/jobs", user=carol, json={"name": "over", "config": valid_config()})
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert "device_hours_per_week" in detail and "used 2.00 of 1.5 device-hours" in detail, detail
    # the week's window slides past the first 15 minutes of that hour (2 x 0.75 h = 1.5 h left, below: +1 s)
    quota = api.get(f"/users/{carol_id}/quota", user=carol).json()
    frees = quota["week_frees_up_at"]
    assert frees and frees[:16] in detail
    expected = now + timedelta(days=5, minutes=-45)
    from datetime import datetime

    got = datetime.fromisoformat(frees.replace("Z", "+00:00"))
    assert abs((got - expected).total_seconds()) < 5, (got, expected)
    assert quota["used"]["device_hours_week"] == pytest.approx(2.0)
    assert api.post(f"/jobs/{job['id']}/retry", user=carol).status_code == 403
    # a raised budget lets them submit again; others are not concerned
    body["device_hours_per_week"] = 3
    assert api.put(f"/users/{carol_id}/quota", user="root", json=body).status_code == 200
    assert api.post("/jobs", user=carol, json={"name": "ok", "config": valid_config()}).status_code == 201


# ---------------------------------------------------------------------------------------------- the queue


def test_queued_jobs_carry_their_position_and_reason(api):
    _clear_queue()
    dave = _user(api, "qd")
    with session_scope() as s:
        scheduler.record_pool(s, "node:test-host", {"cpu": 2})
    small = _submit(api, dave)
    big = _submit(api, dave, num_devices=4)
    r = api.get(f"/jobs/{small['id']}", user=dave)
    assert r.json()["queue"]["position"] == 1
    assert r.json()["queue"]["reason"].startswith("starting: 1 cpu device free on test-host")
    assert api.get(f"/jobs/{big['id']}", user=dave).json()["queue"] == {
        "position": 2,
        "reason": "waiting for 4 cpu devices: no node has more than 2",
    }
    items = api.get("/jobs", user=dave, params={"status": "queued"}).json()["items"]
    assert {i["id"]: i["queue"]["position"] for i in items} == {small["id"]: 1, big["id"]: 2}
    body = {"max_devices": None, "max_running_jobs": 0, "device_hours_per_week": None}
    assert api.put(f"/users/{api.user_ids[dave]}/quota", user="root", json=body).status_code == 200
    reason = api.get(f"/jobs/{small['id']}", user=dave).json()["queue"]["reason"]
    assert reason == f"quota: {dave} runs 0 of 0 jobs"
    set_status(small["id"], "cancelled")
    assert api.get(f"/jobs/{small['id']}", user=dave).json()["queue"] is None
    _clear_queue()


def _claim_all(node_devices: str, worker: str, barrier) -> list[int]:
    """In a spawned process: claim training jobs until the scheduler admits no more."""
    os.environ["TP_NODE_DEVICES"] = node_devices
    from training_platform.core.settings import get_settings

    get_settings.cache_clear()
    from training_platform.workers.supervisor import claim_training_job

    barrier.wait(timeout=120)
    claimed = []
    while (job_id := claim_training_job(worker)) is not None:
        claimed.append(job_id)
    return claimed


def test_racing_claimers_never_hand_out_more_devices_than_the_node_has(api):
    _clear_queue()
    erin = _user(api, "qe")
    ids = [_submit(api, erin)["id"] for _ in range(8)] + [_submit(api, erin, num_devices=2)["id"]]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(3) as pool:
        barrier = manager.Barrier(3)
        results = pool.starmap(_claim_all, [("cpu=3", f"racer-{i}@h", barrier) for i in range(3)])
    claimed = [j for r in results for j in r]
    assert len(claimed) == len(set(claimed)) == 3, results
    with session_scope() as s:
        jobs = s.exec(select(Job).where(col(Job.id).in_(claimed))).all()
        assert {(j.status, j.device, j.devices) for j in jobs} == {("preflight", "cpu", 1)}
        assert sum(j.devices or 0 for j in jobs) == 3
    # one ends: exactly one more device is free, and the 2-device job (waiting) still does not fit
    transition(claimed[0], "running")
    transition(claimed[0], "succeeded")
    from training_platform.workers.supervisor import claim_training_job

    os.environ["TP_NODE_DEVICES"] = "cpu=3"
    try:
        from training_platform.core.settings import get_settings

        get_settings.cache_clear()
        nxt = claim_training_job("solo@h")
        assert nxt in ids and nxt != ids[-1]
        assert claim_training_job("solo@h") is None
    finally:
        del os.environ["TP_NODE_DEVICES"]
        get_settings.cache_clear()
    _clear_queue()


def test_usage_records_follow_the_state_machine(api):
    frank = _user(api, "qf")
    job = _submit(api, frank, num_devices=2)
    with session_scope() as s:
        row = s.get(Job, job["id"])
        row.pool, row.device, row.devices = "node:h", "cpu", 2
    set_status(job["id"], "running")
    with session_scope() as s:
        (record,) = s.exec(select(UsageRecord).where(UsageRecord.job_id == job["id"])).all()
        assert (record.devices, record.device, record.pool, record.ended_at) == (2, "cpu", "node:h", None)
        from training_platform.services.metering import record_sample

        record_sample(s, job["id"], cpu_seconds=12.5, peak_memory_bytes=3 << 20)
        record_sample(s, job["id"], cpu_seconds=10.0, peak_memory_bytes=1 << 20)  # never lowers
    transition(job["id"], "succeeded")
    with session_scope() as s:
        (record,) = s.exec(select(UsageRecord).where(UsageRecord.job_id == job["id"])).all()
        assert record.ended_at is not None and record.cpu_seconds == 12.5 and record.peak_memory_bytes == 3 << 20
    usage = api.get(f"/jobs/{job['id']}", user=frank).json()["usage"]
    assert usage["devices"] == 2 and usage["attempts"] == 1 and usage["running"] is False
    assert usage["cpu_seconds"] == 12.5 and usage["peak_memory_bytes"] == 3 << 20


# ---------------------------------------------------------------------------------------------- migration 0010


def test_single_head_is_0010():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_revision("0010").down_revision == "0009"
    assert script.get_heads() == ["0010"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0010_up_down_and_the_models_match_the_migrations(kind, tmp_path):
    from alembic import command

    with database(kind, tmp_path) as url:
        upgrade(url, "0009")
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO users (name, is_admin, created_at) VALUES ('u', false, CURRENT_TIMESTAMP)")
                )
                uid = conn.execute(text("SELECT id FROM users")).scalar_one()
                conn.execute(
                    text(
                        "INSERT INTO jobs (owner_id, name, kind, algorithm, status, priority, attempts, current_step, "
                        "config, cancel_requested, created_at, updated_at, tags, note) VALUES (:u, 'old', 'train', "
                        "'sft', 'queued', 0, 0, 0, '{}', false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, '[]', '')"
                    ),
                    {"u": uid},
                )
            upgrade(url, "0010")
            with engine.connect() as conn:
                diffs = compare_metadata(
                    MigrationContext.configure(conn, opts={"compare_type": False}), SQLModel.metadata
                )
                assert [d for item in diffs for d in (item if isinstance(item, list) else [item])] == []
                queued_at, pool = conn.execute(text("SELECT queued_at, pool FROM jobs")).one()
                assert queued_at is not None and pool is None  # a waiting job's wait counts from its last change
                if kind == "sqlite":
                    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
                    assert "AUTOINCREMENT" in ddl
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO user_quotas (user_id, max_devices, updated_at) VALUES (:u, 2, CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            engine.dispose()
            command.downgrade(alembic_config(url), "0009")
            engine = make_engine(url)
            with engine.connect() as conn:
                tables = set(conn.dialect.get_table_names(conn))
                assert not {"user_quotas", "usage_records", "compute_pools"} & tables
                assert conn.execute(text("SELECT name FROM jobs")).scalar_one() == "old"
            engine.dispose()
            upgrade(url, "0010")
        finally:
            engine.dispose()
    assert UserQuota.__tablename__ == "user_quotas"
