"""/metrics: prometheus_client's exposition (parsed with its own parser), the families the platform promises, no
user or job names anywhere in it, and TP_METRICS_TOKEN. On SQLite and PostgreSQL (the `api` fixture)."""

from __future__ import annotations

import pytest
from api_helpers import API, running_api, set_status, valid_config
from prometheus_client.parser import text_string_to_metric_families

from training_platform.db import crud
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

FAMILIES = {
    "tp_http_requests",
    "tp_http_request_duration_seconds",
    "tp_jobs",
    "tp_queue_depth",
    "tp_workers",
    "tp_jobs_finished",
    "tp_job_duration_seconds",
    "tp_database_up",
    "tp_broker_up",
    "tp_broker_queue_messages",
    "tp_metric_points",
    "tp_ray_nodes",
}

# Distinctive strings that must never show up in /metrics.
USER_NAME = "zqx-metrics-owner"
JOB_NAME = "zqx private experiment name"


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_parse_have_every_family_and_no_names(api):
    with session_scope() as s:
        _user, token = crud.create_user(s, USER_NAME)
    headers = {"Authorization": f"Bearer {token}"}
    r = api.client.post(f"{API}/jobs", headers=headers, json={"name": JOB_NAME, "config": valid_config()})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    set_status(job_id, "succeeded", worker="zqx-worker@host")
    queued = api.client.post(f"{API}/jobs", headers=headers, json={"name": JOB_NAME + " 2", "config": valid_config()})
    assert queued.status_code == 201
    assert api.client.get(f"{API}/jobs/{job_id}", headers=headers).status_code == 200

    r = api.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    families = _families(text)
    assert set(families) >= FAMILIES, FAMILIES - set(families)
    for secret in (USER_NAME, JOB_NAME, "zqx", token):
        assert secret not in text
    assert api.client.get(f"{API}/metrics").text.count("tp_jobs{") == 6

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("tp_jobs", (("status", "queued"),))] >= 1
    assert samples[("tp_queue_depth", (("queue", "train"),))] >= 1
    assert {q for (n, labels), _ in samples.items() if n == "tp_queue_depth" for _, q in labels} == {
        "train",
        "data",
        "eval",
        "maintenance",
        "inference",
    }
    finished = [(dict(labels), v) for (n, labels), v in samples.items() if n == "tp_jobs_finished_total"]
    assert any(
        lab == {"kind": "train", "algorithm": "sft", "outcome": "succeeded"} and v >= 1 for lab, v in finished
    ), finished
    assert (
        samples[("tp_job_duration_seconds_count", (("algorithm", "sft"), ("kind", "train"), ("outcome", "succeeded")))]
        >= 1
    )
    # Request metrics are per route template, never per raw path (ids would be unbounded, names could leak).
    assert (
        samples[("tp_http_requests_total", (("method", "GET"), ("route", "/api/v1/jobs/{job_id}"), ("status", "200")))]
        >= 1
    )
    assert f"/api/v1/jobs/{job_id}" not in text
    assert samples[("tp_ray_nodes", ())] == 0
    assert samples[("tp_database_up", ())] == 1 and samples[("tp_broker_up", ())] == 1


def test_metrics_token(data_dir, redis_client, tmp_path):
    from api_helpers import database

    with database("sqlite", tmp_path) as url, running_api(data_dir, url, TP_METRICS_TOKEN="s3cr3t-scrape") as api:
        for path in ("/metrics", f"{API}/metrics"):
            assert api.client.get(path).status_code == 401
            assert api.client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            # A user's API token is not the metrics token.
            user_token = api.tokens["root"]
            assert api.client.get(path, headers={"Authorization": f"Bearer {user_token}"}).status_code == 401
            r = api.client.get(path, headers={"Authorization": "Bearer s3cr3t-scrape"})
            assert r.status_code == 200 and "tp_jobs" in _families(r.text)
            assert "s3cr3t-scrape" not in r.text


def test_metric_point_count_is_exact_and_uses_the_estimate_on_large_postgresql_tables(api, monkeypatch):
    """SQLite and small tables: COUNT(*). PostgreSQL past the threshold: pg_class.reltuples (after ANALYZE it is
    exact for a table this small, so the two paths must agree)."""
    from sqlalchemy import text
    from sqlmodel import select

    from training_platform.api.routes import health
    from training_platform.db.models import MetricPoint

    with session_scope() as s:
        job = crud.create_job(s, owner=crud.create_user(s, "zqx-counter")[0], name="count", config=valid_config())
        crud.add_metric_points(s, job.id, [(step, "loss", 1.0 / step) for step in range(1, 41)])
    with session_scope() as s:
        exact = s.exec(select(health.func.count()).select_from(MetricPoint)).one()
        assert exact >= 40
        assert health._metric_point_count(s) == exact
        if s.get_bind().dialect.name == "postgresql":
            s.exec(text("ANALYZE metric_points"))
            monkeypatch.setattr(health, "ESTIMATE_ABOVE_ROWS", 10)
            assert health._metric_point_count(s) == exact


def test_device_seconds_are_counted_per_device_type(api):
    """tp_device_seconds_total{device}: what the workers add, summed in /metrics; nothing for seconds <= 0 or
    values that are not numbers, and never an exception."""
    from training_platform.core import telemetry

    def device_seconds() -> dict[str, float]:
        text = api.client.get("/metrics").text
        family = _families(text).get("tp_device_seconds")
        return {s.labels["device"]: s.value for s in family.samples if s.name.endswith("_total")} if family else {}

    before = device_seconds()
    telemetry.add_device_seconds("cpu", 3.0)
    for ignored in (0.0, -5.0, float("nan"), float("inf"), "many"):
        telemetry.add_device_seconds("cuda", ignored)  # type: ignore[arg-type]
    after = device_seconds()
    assert after["cpu"] - before.get("cpu", 0.0) == pytest.approx(3.0)  # earlier tests may have counted some
    assert after.get("cuda", 0.0) == before.get("cuda", 0.0)
    assert 'tp_device_seconds_total{device="cpu"}' in api.client.get("/metrics").text
