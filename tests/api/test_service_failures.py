"""Degraded services: the broker down (jobs still accepted, with a warning), the database down (503), open auth."""

from __future__ import annotations

import pytest
from api_helpers import API, REDIS_TEST_URL, database, get_job_row, running_api, valid_config

pytestmark = pytest.mark.integration

DEAD_REDIS = "redis://127.0.0.1:1/15"


def test_broker_down_keeps_the_job_queued_and_warns(data_dir, redis_client, tmp_path, caplog):
    with database("sqlite", tmp_path) as url, running_api(data_dir, url, REDIS_URL=DEAD_REDIS) as api:
        r = api.post("/jobs", json={"name": "no broker", "config": valid_config()})
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["status"] == "queued" and "broker unreachable" in job["warning"]
        assert get_job_row(job["id"]).status == "queued"
        assert any("no worker was woken" in rec.getMessage() for rec in caplog.records)
        assert api.get(f"/jobs/{job['id']}").json().get("warning") is None  # only on the submit response

        health = api.client.get(f"{API}/health")
        assert health.status_code == 200
        assert health.json() == {**health.json(), "status": "ok", "database": "ok", "broker": "unreachable"}
        dash = api.get("/monitoring/dashboard").json()
        assert dash["queue_depth"]["broker"] is None and dash["queue_depth"]["train"] == 1


def test_database_down_is_503_and_the_app_starts_without_it(data_dir, monkeypatch):
    from fastapi.testclient import TestClient

    from training_platform.api.app import create_app
    from training_platform.core.settings import get_settings
    from training_platform.db.session import get_engine

    monkeypatch.setenv("TP_DATA_DIR", str(data_dir))
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    monkeypatch.setenv("REDIS_URL", REDIS_TEST_URL)
    get_settings.cache_clear()
    get_engine.cache_clear()
    try:
        app = create_app()  # no database work at creation
        with TestClient(app) as client:
            r = client.get(f"{API}/health")
            assert r.status_code == 503
            assert r.json()["status"] == "error" and r.json()["database"].startswith("error: ")
            assert "tp_database_up 0" in client.get("/metrics").text
    finally:
        get_engine().dispose()
        get_settings.cache_clear()
        get_engine.cache_clear()


def test_open_auth_mode_uses_a_local_admin(data_dir, redis_client, tmp_path):
    with database("sqlite", tmp_path) as url, running_api(data_dir, url, TP_AUTH_MODE="open") as api:
        me = api.client.get(f"{API}/users/me")
        assert me.status_code == 200 and me.json()["name"] == "local" and me.json()["is_admin"] is True
        r = api.client.post(f"{API}/jobs", json={"name": "open", "config": valid_config()})
        assert r.status_code == 201 and r.json()["owner"] == "local"
        # Everyone is the same local admin: it sees the jobs of token users too.
        assert api.client.get(f"{API}/jobs").json()["total"] == 1
