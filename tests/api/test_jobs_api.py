"""The jobs API end to end on a real database (SQLite and PostgreSQL) and the real local Redis.

Every module-level test runs twice, once per database (the `api` fixture is parametrized).
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from pathlib import Path

import pytest
from api_helpers import (
    API,
    get_job_row,
    make_run_dir,
    row_counts,
    set_status,
    transition,
    update_job,
    valid_config,
)

from training_platform.db import crud, rollups
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration


def submit(api, user="alice", name="job", config=None, priority=None, **kw):
    body = {"name": name, "config": config or valid_config()}
    if priority is not None:
        body["priority"] = priority
    return api.post("/jobs", user=user, json=body, **kw)


def submitted(api, **kw) -> dict:
    r = submit(api, **kw)
    assert r.status_code == 201, r.text
    return r.json()


def locs(response) -> list[str]:
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    for item in detail:
        assert set(item) == {"loc", "msg"} and isinstance(item["loc"], str) and item["msg"], item
    return [item["loc"] for item in detail]


# ---------------------------------------------------------------------------------------------- submit


def test_create_job_returns_201_and_stores_a_queued_job(api, redis_client):
    before = row_counts()
    r = submit(api, name="  first job  ", priority=5)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["name"] == "first job" and job["status"] == "queued" and job["priority"] == 5
    assert job["owner"] == "alice" and job["algorithm"] == "sft" and job["max_steps"] == 5
    assert job["attempts"] == 0 and job["cancel_requested"] is False and job["warning"] is None
    assert job["config"]["model"]["path"] == "demo/model"
    assert job["created_at"].endswith("Z") or job["created_at"].endswith("+00:00")
    after = row_counts()
    assert after["Job"] == before["Job"] + 1 and after["JobEvent"] == before["JobEvent"] + 1
    # The wake-up message reached the broker's train queue (some priority list of it).
    assert any(redis_client.llen(key) for key in redis_client.keys("train*"))

    got = api.get(f"/jobs/{job['id']}").json()
    expected_fields = {
        "id",
        "name",
        "owner",
        "algorithm",
        "status",
        "priority",
        "attempts",
        "worker",
        "heartbeat_at",
        "current_step",
        "max_steps",
        "run_dir",
        "error",
        "preflight",
        "cancel_requested",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "config",
        "cloned_from",
    }
    assert expected_fields <= set(got)
    assert "token" not in r.text and api.tokens["alice"] not in r.text


def test_create_job_accepts_hub_ids_and_absolute_paths_inside_the_data_dir(api):
    cfg = valid_config(
        model={"path": "Qwen/Qwen2.5-0.5B-Instruct"},
        data={"train_file": str(api.data_dir / "demo/data/sft.jsonl"), "eval_file": "demo/data/../data/sft_eval.jsonl"},
    )
    job = submitted(api, name="hub", config=cfg)
    assert job["config"]["model"]["path"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_validation_lists_every_error_with_field_paths(api):
    before = row_counts()
    cfg = valid_config(
        algorithm={"name": "grpo", "num_generations": 1}, training={"learning_rate": -1, "max_steps": 0}, trainig={}
    )
    cfg["data"]["train_file"] = "/etc/passwd"
    r = submit(api, config=cfg)
    assert r.status_code == 422
    found = locs(r)
    assert {
        "algorithm.num_generations",
        "training.learning_rate",
        "training.max_steps",
        "trainig",
        "data.train_file",
    } <= set(found), found
    msgs = {d["loc"]: d["msg"] for d in r.json()["detail"]}
    assert msgs["algorithm.num_generations"] == "must be >= 2, got 1"
    assert "did you mean 'training'" in msgs["trainig"]
    assert "outside the allowed directories" in msgs["data.train_file"]
    assert row_counts() == before

    # Layer 2 (cross-field rules) is reported too.
    r = submit(
        api,
        config=valid_config(
            algorithm={"name": "grpo", "num_generations": 2}, training={"warmup_ratio": 0.1, "warmup_steps": 3}
        ),
    )
    assert r.status_code == 422
    assert {"rewards", "training.warmup_steps"} <= set(locs(r))


PPO = {"name": "ppo", "reward_model_path": "/usr/lib"}

# (id, request body or raw kwargs, expected status, expected loc (422) or message fragment)
BAD_SUBMISSIONS = [
    ("missing-name", {"config": valid_config()}, 422, "name"),
    ("empty-name", {"name": "", "config": valid_config()}, 422, "name"),
    ("blank-name", {"name": "   ", "config": valid_config()}, 422, "name"),
    ("name-too-long", {"name": "x" * 201, "config": valid_config()}, 422, "name"),
    ("name-not-a-string", {"name": 5, "config": valid_config()}, 422, "name"),
    ("missing-config", {"name": "n"}, 422, "config"),
    ("config-is-a-list", {"name": "n", "config": [1, 2]}, 422, "config"),
    ("config-is-a-string", {"name": "n", "config": "model: x"}, 422, "config"),
    ("unknown-config-key", {"name": "n", "config": {**valid_config(), "trainig": {}}}, 422, "trainig"),
    ("unknown-nested-key", {"name": "n", "config": valid_config(training={"max_step": 5})}, 422, "training.max_step"),
    ("bad-algorithm", {"name": "n", "config": valid_config(algorithm={"name": "sftt"})}, 422, "algorithm.name"),
    (
        "missing-algorithm",
        {"name": "n", "config": {k: v for k, v in valid_config().items() if k != "algorithm"}},
        422,
        "algorithm",
    ),
    (
        "lr-out-of-range",
        {"name": "n", "config": valid_config(training={"learning_rate": 5})},
        422,
        "training.learning_rate",
    ),
    (
        "batch-size-zero",
        {"name": "n", "config": valid_config(training={"per_device_batch_size": 0})},
        422,
        "training.per_device_batch_size",
    ),
    (
        "wrong-type-in-config",
        {"name": "n", "config": valid_config(training={"max_steps": "ten"})},
        422,
        "training.max_steps",
    ),
    (
        "path-etc-passwd",
        {"name": "n", "config": valid_config(data={"train_file": "/etc/passwd"})},
        422,
        "data.train_file",
    ),
    ("path-dotdot", {"name": "n", "config": valid_config(data={"train_file": "../../x"})}, 422, "data.train_file"),
    (
        "path-symlink-escape",
        {"name": "n", "config": valid_config(data={"train_file": "escape/passwd"})},
        422,
        "data.train_file",
    ),
    (
        "eval-file-outside",
        {
            "name": "n",
            "config": valid_config(data={"train_file": "demo/data/sft.jsonl", "eval_file": "/tmp/../etc/hosts"}),
        },
        422,
        "data.eval_file",
    ),
    ("model-path-outside", {"name": "n", "config": valid_config(model={"path": "/usr/lib"})}, 422, "model.path"),
    (
        "model-path-through-symlink",
        {"name": "n", "config": valid_config(model={"path": "escape/ssl"})},
        422,
        "model.path",
    ),
    ("model-path-dotdot", {"name": "n", "config": valid_config(model={"path": "../model"})}, 422, "model.path"),
    (
        "ppo-reward-model-outside",
        {"name": "n", "config": valid_config(data={"train_file": "demo/data/rl.jsonl"}, algorithm=PPO)},
        422,
        "algorithm.reward_model_path",
    ),
    ("priority-too-high", {"name": "n", "config": valid_config(), "priority": 1001}, 422, "priority"),
    ("priority-too-low", {"name": "n", "config": valid_config(), "priority": -1001}, 422, "priority"),
    ("priority-string", {"name": "n", "config": valid_config(), "priority": "high"}, 422, "priority"),
    ("priority-float", {"name": "n", "config": valid_config(), "priority": 1.5}, 422, "priority"),
    ("priority-bool", {"name": "n", "config": valid_config(), "priority": True}, 422, "priority"),
    ("unknown-body-field", {"name": "n", "config": valid_config(), "owner": "bob"}, 422, "owner"),
    ("body-is-a-list", [{"name": "n"}], 422, "<body>"),
    (
        "malformed-json",
        {"content": b'{"name": "n", "config": {', "headers": {"Content-Type": "application/json"}},
        422,
        "<body>",
    ),
    ("empty-json-body", {"content": b"", "headers": {"Content-Type": "application/json"}}, 422, "<body>"),
    (
        "wrong-content-type",
        {"content": b'{"name": "n"}', "headers": {"Content-Type": "text/plain"}},
        415,
        "application/json",
    ),
    ("form-encoded", {"data": {"name": "n"}}, 415, "application/json"),
    (
        "no-content-type",
        {"content": b'{"name": "n", "config": {}}', "headers": {"Content-Type": ""}},
        415,
        "no Content-Type",
    ),
    (
        "no-token",
        {"json": {"name": "n", "config": valid_config()}, "headers": {"Authorization": ""}},
        401,
        "not authenticated",
    ),
    (
        "wrong-token",
        {"json": {"name": "n", "config": valid_config()}, "headers": {"Authorization": "Bearer tp_x"}},
        401,
        "invalid",
    ),
]


@pytest.mark.parametrize(("case", "body", "status", "where"), BAD_SUBMISSIONS, ids=[c[0] for c in BAD_SUBMISSIONS])
def test_bad_submission_is_rejected_and_leaves_no_row(api, case, body, status, where):
    before = row_counts()
    raw = isinstance(body, dict) and ({"content", "data", "json"} & set(body))
    if raw:
        kw = copy.deepcopy(body)
        headers = {**api.h("alice"), **kw.pop("headers", {})}
        headers = {k: v for k, v in headers.items() if v}
        r = api.client.post(f"{API}/jobs", headers=headers, **kw)
    else:
        r = api.post("/jobs", json=body)
    assert r.status_code == status, (case, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"]
    if status == 422:
        assert where in locs(r), (case, detail)
        assert all(len(d["msg"]) > 5 for d in detail)
    else:
        assert isinstance(detail, str) and where in detail, (case, detail)
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"
    assert row_counts() == before, case


# ---------------------------------------------------------------------------------------------- fixtures of jobs


@pytest.fixture(scope="module")
def jobs(api):
    """alice: queued, running (with a run dir), succeeded; bob: queued."""
    ids = {}
    for key, user, status in (
        ("queued", "alice", "queued"),
        ("running", "alice", "running"),
        ("succeeded", "alice", "succeeded"),
        ("bob", "bob", "queued"),
    ):
        ids[key] = submitted(api, user=user, name=f"fixture {key}")["id"]
        extra = {}
        if status == "running":
            extra = {"run_dir": str(make_run_dir(api.data_dir, ids[key], ["step 1"])), "worker": "w1"}
        set_status(ids[key], status, **extra)
    return ids


def _other_bad_requests(jobs):
    j = jobs
    return [
        ("unknown-job", "get", "/jobs/999999", None, 404, "job 999999 not found"),
        ("other-users-job", "get", f"/jobs/{j['bob']}", None, 404, "not found"),
        ("other-users-job-cancel", "post", f"/jobs/{j['bob']}/cancel", None, 404, "not found"),
        ("other-users-job-metrics", "get", f"/jobs/{j['bob']}/metrics", None, 404, "not found"),
        ("job-id-not-int", "get", "/jobs/abc", None, 422, "path.job_id"),
        ("cancel-finished", "post", f"/jobs/{j['succeeded']}/cancel", None, 409, "already succeeded"),
        ("retry-running", "post", f"/jobs/{j['running']}/retry", None, 409, "is running"),
        ("retry-queued", "post", f"/jobs/{j['queued']}/retry", None, 409, "is queued"),
        ("retry-succeeded", "post", f"/jobs/{j['succeeded']}/retry", None, 409, "is succeeded"),
        ("delete-queued", "delete", f"/jobs/{j['queued']}", None, 409, "cancel it first"),
        ("delete-running", "delete", f"/jobs/{j['running']}", None, 409, "cancel it first"),
        ("limit-zero", "get", "/jobs?limit=0", None, 422, "query.limit"),
        ("limit-1000", "get", "/jobs?limit=1000", None, 422, "query.limit"),
        ("offset-negative", "get", "/jobs?offset=-1", None, 422, "query.offset"),
        ("bad-sort", "get", "/jobs?sort=name", None, 422, "query.sort"),
        ("bad-status-filter", "get", "/jobs?status=done", None, 422, "query.status[0]"),
        ("metrics-max-points-zero", "get", f"/jobs/{j['queued']}/metrics?max_points=0", None, 422, "query.max_points"),
        (
            "metrics-max-points-huge",
            "get",
            f"/jobs/{j['queued']}/metrics?max_points=20000",
            None,
            422,
            "query.max_points",
        ),
        (
            "metrics-inverted-range",
            "get",
            f"/jobs/{j['queued']}/metrics?min_step=10&max_step=5",
            None,
            422,
            "query.min_step",
        ),
        ("logs-tail-zero", "get", f"/jobs/{j['queued']}/logs?tail=0", None, 422, "query.tail"),
        (
            "clone-bad-override-value",
            "post",
            f"/jobs/{j['queued']}/clone",
            {"overrides": {"training.max_steps": 0}},
            422,
            "training.max_steps",
        ),
        (
            "clone-bad-override-key",
            "post",
            f"/jobs/{j['queued']}/clone",
            {"overrides": {"data.train_file.x": 1}},
            422,
            "overrides.data.train_file.x",
        ),
        (
            "clone-empty-override-key",
            "post",
            f"/jobs/{j['queued']}/clone",
            {"overrides": {"training..x": 1}},
            422,
            "overrides.training..x",
        ),
        (
            "clone-verl-override-naming-code",
            "post",
            f"/jobs/{j['queued']}/clone",
            {"overrides": {"engine": "verl", "verl.overrides": {"custom_cls.path": "/tmp/evil.py"}}},
            422,
            "verl.overrides",
        ),
        ("clone-unknown-field", "post", f"/jobs/{j['queued']}/clone", {"override": {}}, 422, "override"),
        ("clone-other-users-job", "post", f"/jobs/{j['bob']}/clone", {}, 404, "not found"),
        ("users-create-not-admin", "post", "/users", {"name": "mallory"}, 403, "admin only"),
        ("users-list-not-admin", "get", "/users", None, 403, "admin only"),
        ("unknown-route", "get", "/nope", None, 404, "Not Found"),
    ]


OTHER_CASES = [c[0] for c in _other_bad_requests({"bob": 0, "queued": 0, "running": 0, "succeeded": 0})]


@pytest.mark.parametrize("case", OTHER_CASES)
def test_bad_request_gives_clear_4xx_and_changes_nothing(api, jobs, case):
    _, method, path, body, status, where = next(c for c in _other_bad_requests(jobs) if c[0] == case)
    before = row_counts()
    statuses = {k: get_job_row(v).status for k, v in jobs.items()}
    r = getattr(api, method)(path, **({"json": body} if body is not None else {}))
    assert r.status_code == status, (case, r.text)
    detail = r.json()["detail"]
    text = str(detail) if isinstance(detail, str) else " ".join(d["loc"] + " " + d["msg"] for d in detail)
    assert where in text, (case, detail)
    assert row_counts() == before
    assert {k: get_job_row(v).status for k, v in jobs.items()} == statuses


# ---------------------------------------------------------------------------------------------- auth


def test_auth_matrix(api, jobs):
    url = f"{API}/jobs/{jobs['queued']}"
    r = api.client.get(url)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert api.client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert api.client.get(url, headers={"Authorization": f"Basic {api.tokens['alice']}"}).status_code == 401
    assert api.get(url[len(API) :], user="alice").status_code == 200
    assert api.get(url[len(API) :], user="bob").status_code == 404
    assert api.get(url[len(API) :], user="root").status_code == 200

    bob_ids = {j["id"] for j in api.get("/jobs?limit=200", user="bob").json()["items"]}
    assert jobs["queued"] not in bob_ids and jobs["bob"] in bob_ids
    alice = api.get("/jobs?limit=200", user="alice").json()
    assert all(j["owner"] == "alice" for j in alice["items"]) and jobs["bob"] not in {j["id"] for j in alice["items"]}
    everyone = api.get("/jobs?limit=200", user="root").json()
    assert {jobs["queued"], jobs["bob"]} <= {j["id"] for j in everyone["items"]}
    assert everyone["total"] > alice["total"]
    # The owner filter cannot widen a non-admin's view.
    assert api.get("/jobs?owner=bob", user="alice").json()["total"] == 0
    assert {j["owner"] for j in api.get("/jobs?owner=bob&limit=200", user="root").json()["items"]} == {"bob"}

    me = api.get("/users/me", user="bob").json()
    assert me["name"] == "bob" and me["is_admin"] is False and "token" not in me


def test_listing_filters_sorting_and_pagination(api, jobs):
    made = [submitted(api, name=f"Sweep-{i}", priority=p)["id"] for i, p in enumerate((3, -2, 7))]
    page = api.get("/jobs?q=sweep-&sort=-priority").json()
    assert [j["id"] for j in page["items"]] == [made[2], made[0], made[1]] and page["total"] == 3
    assert [j["id"] for j in api.get("/jobs?q=SWEEP&sort=priority").json()["items"]] == [made[1], made[0], made[2]]
    assert [j["id"] for j in api.get("/jobs?q=sweep&sort=created_at").json()["items"]] == made
    assert [j["id"] for j in api.get("/jobs?q=sweep").json()["items"]] == made[::-1]  # newest first
    assert api.get("/jobs?q=%25").json()["total"] == 0  # LIKE wildcards are literal

    p1 = api.get("/jobs?q=sweep&sort=created_at&limit=2&offset=0").json()
    p2 = api.get("/jobs?q=sweep&sort=created_at&limit=2&offset=2").json()
    assert (p1["limit"], p1["offset"], p1["total"]) == (2, 0, 3)
    assert [j["id"] for j in p1["items"] + p2["items"]] == made

    statuses = api.get("/jobs?status=running&status=succeeded&limit=200").json()
    assert {j["status"] for j in statuses["items"]} == {"running", "succeeded"}
    assert {jobs["running"], jobs["succeeded"]} <= {j["id"] for j in statuses["items"]}
    assert api.get("/jobs?algorithm=dpo").json()["total"] == 0
    assert api.get("/jobs?algorithm=sft").json()["total"] >= 3
    by_status = [j["status"] for j in api.get("/jobs?sort=status&limit=200").json()["items"]]
    assert by_status == sorted(by_status)

    past_end = api.get("/jobs?q=sweep&offset=10").json()
    assert past_end["items"] == [] and past_end["total"] == 3

    # engine: a config without one trains with trl; kind: train/data/eval
    verl = submitted(api, name="Sweep-verl", config={**valid_config(), "engine": "verl"})["id"]
    assert [j["id"] for j in api.get("/jobs?q=sweep&engine=verl").json()["items"]] == [verl]
    assert {j["id"] for j in api.get("/jobs?q=sweep&engine=trl&limit=200").json()["items"]} == set(made)
    assert api.get("/jobs?q=sweep&kind=eval").json()["total"] == 0
    assert api.get("/jobs?q=sweep&kind=train").json()["total"] == 4


def test_listing_items_equal_the_job_detail(api, jobs):
    """The listing reads columns and passes JSON columns through as stored text (no JobRead validation); every
    field must still come out exactly as GET /jobs/{id} (which goes through JobRead) shows it."""
    job = submitted(api, name="fully populated")
    update_job(
        job["id"],
        preflight={"checks": [{"name": "rows", "ok": True, "value": 1.5, "text": 'é "q"'}]},
        best_checkpoint={"metric": "accuracy", "step": 20, "value": 0.25, "evaluation_id": None},
        error="Traceback: é\nline 2",
        worker="w-1",
        current_step=7,
        cloned_from=jobs["queued"],
    )
    set_status(job["id"], "failed")
    listed = {j["id"]: j for j in api.get("/jobs?limit=200", user="root").json()["items"]}
    assert job["id"] in listed and len(listed) >= 5
    for job_id, item in listed.items():
        detail = api.get(f"/jobs/{job_id}", user="root").json()
        detail.pop("distributed")  # the detail's own additions: the job's processes and its usage
        detail.pop("usage")
        assert item == detail, job_id
    item = listed[job["id"]]
    assert item["preflight"]["checks"][0]["text"] == 'é "q"' and item["best_checkpoint"]["step"] == 20
    assert item["finished_at"].endswith("Z") and item["owner"] == "alice"


# ---------------------------------------------------------------------------------------------- lifecycle


def test_cancel_a_queued_job(api):
    job = submitted(api, name="to cancel")
    r = api.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
    events = api.get(f"/jobs/{job['id']}/events").json()
    assert [(e["from_status"], e["to_status"]) for e in events] == [(None, "queued"), ("queued", "cancelled")]
    assert "alice" in events[-1]["reason"]
    assert api.post(f"/jobs/{job['id']}/cancel").status_code == 409


def test_cancel_a_running_job_requests_a_stop(api):
    job_id = submitted(api, name="running, to cancel")["id"]
    run_dir = str(make_run_dir(api.data_dir, job_id, ["step 1"]))
    set_status(job_id, "running", run_dir=run_dir, worker="w9")
    r = api.post(f"/jobs/{job_id}/cancel")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "running" and body["cancel_requested"] is True
    assert (Path(run_dir) / "STOP").exists()
    assert api.get(f"/jobs/{job_id}/events").json()[-1]["reason"] == "cancel requested by alice"
    # The worker finishes the step, checkpoints and marks the job cancelled.
    transition(job_id, "cancelled", reason="stopped by request")
    update_job(job_id, attempts=1)
    assert api.get(f"/jobs/{job_id}").json()["status"] == "cancelled"

    # Retry: back to queued, attempts kept, the STOP file and the cancel flag cleared.
    r = api.post(f"/jobs/{job_id}/retry")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "queued" and body["attempts"] == 1 and body["cancel_requested"] is False
    assert body["warning"] is None
    assert not (Path(run_dir) / "STOP").exists()
    assert api.get(f"/jobs/{job_id}/events").json()[-1]["to_status"] == "queued"


def test_retry_a_failed_job(api):
    job = submitted(api, name="will fail")
    set_status(job["id"], "failed", error="boom", attempts=2)
    r = api.post(f"/jobs/{job['id']}/retry")
    assert r.status_code == 200
    assert r.json()["status"] == "queued" and r.json()["attempts"] == 2 and r.json()["finished_at"] is None


def test_clone_with_overrides(api, jobs):
    source = submitted(api, name="original", priority=4)
    r = api.post(
        f"/jobs/{source['id']}/clone",
        json={
            "overrides": {
                "training.max_steps": 50,
                "training.learning_rate": 0.001,
                "data.eval_file": "demo/data/sft_eval.jsonl",
            }
        },
    )
    assert r.status_code == 201, r.text
    clone = r.json()
    assert clone["cloned_from"] == source["id"] and clone["name"] == "original (clone)"
    assert clone["priority"] == 4 and clone["status"] == "queued" and clone["max_steps"] == 50
    assert clone["config"]["training"] == {"max_steps": 50, "per_device_batch_size": 4, "learning_rate": 0.001}
    assert clone["config"]["data"]["eval_file"] == "demo/data/sft_eval.jsonl"
    assert api.get(f"/jobs/{source['id']}").json()["config"]["training"]["max_steps"] == 5  # source untouched

    r = api.post(f"/jobs/{source['id']}/clone", json={"name": "mine", "priority": -3}, user="root")
    assert r.status_code == 201 and r.json()["owner"] == "root" and r.json()["priority"] == -3
    r = api.post(f"/jobs/{source['id']}/clone")  # no body: an identical copy
    assert r.status_code == 201 and r.json()["config"] == source["config"] and r.json()["name"] == "original (clone)"

    before = row_counts()
    r = api.post(f"/jobs/{source['id']}/clone", json={"overrides": {"data.train_file": "/etc/shadow"}})
    assert r.status_code == 422 and locs(r) == ["data.train_file"]
    assert row_counts() == before


def test_current_step_is_never_behind_the_last_metric_row(api):
    """Progress and charts read different tables: the batch that stores metrics raises current_step with it."""
    job = submitted(api, name="progress")
    set_status(job["id"], "running")
    with session_scope() as s:
        crud.add_metric_points(s, job["id"], [(step, "loss", 1.0 / step) for step in (1, 2, 3)])
    assert api.get(f"/jobs/{job['id']}").json()["current_step"] == 3
    with session_scope() as s:  # a late batch of earlier steps never moves it back
        crud.add_metric_points(s, job["id"], [(2, "lr", 0.1)])
    assert api.get(f"/jobs/{job['id']}").json()["current_step"] == 3


def test_delete_removes_rows_and_files(api):
    job = submitted(api, name="to delete")
    job_id = job["id"]
    run = make_run_dir(api.data_dir, job_id, ["a", "b"])
    (run / "checkpoints" / "step_000010").mkdir()
    (run / "checkpoints" / "step_000010" / "model.safetensors").write_bytes(b"x" * 10)
    set_status(job_id, "succeeded", run_dir=str(run))
    with session_scope() as s:
        crud.add_metric_points(s, job_id, [(i, "loss", 1.0 / i) for i in range(1, 101)])
        crud.upsert_checkpoint(
            s, job_id, step=10, path=str(run / "checkpoints/step_000010"), sha256="0" * 64, size_bytes=10
        )
    before = row_counts()

    r = api.delete(f"/jobs/{job_id}", user="bob")
    assert r.status_code == 404
    r = api.delete(f"/jobs/{job_id}")
    assert r.status_code == 204 and r.content == b""
    after = row_counts()
    assert after["Job"] == before["Job"] - 1
    assert after["JobEvent"] == before["JobEvent"] - 4  # submitted + preflight + running + succeeded
    assert after["MetricPoint"] == before["MetricPoint"] - 100
    assert after["Checkpoint"] == before["Checkpoint"] - 1
    assert not run.exists()
    assert api.get(f"/jobs/{job_id}").status_code == 404
    assert api.delete(f"/jobs/{job_id}").status_code == 404


def test_delete_keeps_a_run_dir_outside_the_data_dir(api, tmp_path):
    job = submitted(api, name="outside run dir")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "train.log").write_text("keep me\n")
    set_status(job["id"], "failed", run_dir=str(outside))
    assert api.delete(f"/jobs/{job['id']}").status_code == 204
    assert (outside / "train.log").exists()


# ---------------------------------------------------------------------------------------------- outputs


def test_checkpoints_are_listed_by_step(api):
    job = submitted(api, name="ckpts")
    with session_scope() as s:
        for step in (30, 10, 20):
            crud.upsert_checkpoint(
                s, job["id"], step=step, path=f"/runs/x/step_{step:06d}", sha256=f"{step:064d}", size_bytes=step * 1000
            )
        crud.mark_checkpoints_removed(s, job["id"], ["/runs/x/step_000010"])
    r = api.get(f"/jobs/{job['id']}/checkpoints")
    assert r.status_code == 200
    items = r.json()
    assert [c["step"] for c in items] == [10, 20, 30]
    assert set(items[0]) == {
        "step",
        "path",
        "sha256",
        "size_bytes",
        "removed",
        "created_at",
        "evaluation_id",
        "eval_metrics",
        "is_best",
    }
    assert items[0]["evaluation_id"] is None and items[0]["eval_metrics"] == {} and items[0]["is_best"] is False
    assert [c["removed"] for c in items] == [True, False, False] and items[2]["size_bytes"] == 30000
    assert api.get(f"/jobs/{job['id']}/checkpoints", user="bob").status_code == 404


def test_logs_tail(api):
    job = submitted(api, name="logs")
    assert api.get(f"/jobs/{job['id']}/logs").json() == {"lines": []}  # not started
    lines = [f"line {i}" for i in range(1000)]
    run = make_run_dir(api.data_dir, job["id"], lines)
    set_status(job["id"], "running", run_dir=str(run))
    assert api.get(f"/jobs/{job['id']}/logs").json()["lines"] == lines[-200:]
    assert api.get(f"/jobs/{job['id']}/logs?tail=3").json()["lines"] == lines[-3:]
    assert api.get(f"/jobs/{job['id']}/logs?tail=5000").json()["lines"] == lines

    # The whole log as a download; error.json and the failure bundle once a run wrote them.
    r = api.get(f"/jobs/{job['id']}/files/train.log")
    assert r.status_code == 200 and r.text.splitlines() == lines
    assert f'filename="job-{job["id"]}-train.log"' in r.headers["content-disposition"]
    assert api.get(f"/jobs/{job['id']}/files/error.json").status_code == 404
    (run / "error.json").write_text('{"type": "RuntimeError"}')
    assert api.get(f"/jobs/{job['id']}/files/error.json").json() == {"type": "RuntimeError"}
    assert api.get(f"/jobs/{job['id']}/files/config_effective.yaml").status_code == 422, "only the listed files"
    assert api.get(f"/jobs/{job['id']}/files/train.log", user="bob").status_code == 404


def _read_sse(response) -> tuple[list[str], str | None]:
    data, end, event = [], None, None
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            if event == "end":
                end = line[len("data: ") :]
                break
            data.append(line[len("data: ") :])
        elif line == "":
            event = None
    return data, end


def test_log_stream_of_a_finished_job(api):
    job = submitted(api, name="sse done")
    lines = [f"step {i} loss={1 / (i + 1):.4f}" for i in range(50)] + ["", "done: ünïcode"]
    run = make_run_dir(api.data_dir, job["id"], lines)
    set_status(job["id"], "failed", run_dir=str(run))
    with api.client.stream("GET", f"{API}/jobs/{job['id']}/logs/stream", headers=api.h("alice")) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        data, end = _read_sse(r)
    assert data == lines and end == "failed"

    with api.client.stream("GET", f"{API}/jobs/{job['id']}/logs/stream?tail=2", headers=api.h("alice")) as r:
        data, end = _read_sse(r)
    assert data == lines[-2:] and end == "failed"


def test_log_stream_follows_a_growing_file(api, monkeypatch):
    from training_platform.api.routes import logs

    monkeypatch.setattr(logs, "POLL_INTERVAL_S", 0.02)
    job = submitted(api, name="sse live")
    set_status(job["id"], "running")  # no run dir yet: the stream waits for it
    expected = [f"live {i}" for i in range(30)]

    def worker():
        time.sleep(0.2)
        run = make_run_dir(api.data_dir, job["id"], [])
        update_job(job["id"], run_dir=str(run))
        with (run / "train.log").open("a") as f:
            for i, line in enumerate(expected):
                f.write(line + ("\n" if i % 3 else ""))  # partial writes: the newline comes later
                f.flush()
                if not i % 3:
                    time.sleep(0.01)
                    f.write("\n")
                    f.flush()
                time.sleep(0.005)
        transition(job["id"], "succeeded")

    t = threading.Thread(target=worker)
    t.start()
    try:
        with api.client.stream("GET", f"{API}/jobs/{job['id']}/logs/stream", headers=api.h("alice")) as r:
            data, end = _read_sse(r)
    finally:
        t.join()
    assert data == expected and end == "succeeded"


def _bucket_extremes(points: dict[int, float], width: int):
    """Min and max per aligned bucket [b * width, (b + 1) * width)."""
    per: dict[int, list[float]] = {}
    for step, value in points.items():
        per.setdefault(step // width, []).append(value)
    return {b: (min(v), max(v)) for b, v in per.items()}


def test_metrics_downsampling_keeps_every_bucket_extreme(api):
    job = submitted(api, name="metrics")
    n = 30_000
    truth = {s: math.sin(s / 700.0) + 0.3 * math.sin(s / 37.0) for s in range(1, n + 1)}
    truth[3_137], truth[27_777] = 50.0, -50.0
    rows = [(s, "loss", v) for s, v in truth.items()] + [(s * 10, "lr", 1e-3 / s) for s in range(1, 11)]
    with session_scope() as s:
        for i in range(0, len(rows), 5000):  # crud.add_metric_points sends one multi-row INSERT per call
            crud.add_metric_points(s, job["id"], rows[i : i + 5000])

    r = api.get(f"/jobs/{job['id']}/metrics?names=loss,lr,nope&max_points=1000")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["names_available"] == ["loss", "lr"]
    loss = body["series"]["loss"]
    assert len(loss) <= 1000 and body["downsampled"]["loss"] is True
    steps = [p[0] for p in loss]
    assert steps == sorted(set(steps)), "steps strictly increasing"
    assert steps[0] == 1 and steps[-1] == n
    values = dict((s, v) for s, v in loss)
    assert values[3_137] == 50.0 and values[27_777] == -50.0
    assert all(truth[s] == v for s, v in loss), "every point is a stored point"
    buckets = (1000 - 2) // 2
    width = 64  # the smallest power of two giving <= 499 aligned buckets over steps 1..30000
    assert n // width + 1 <= buckets < n // (width // 2) + 1
    extremes = _bucket_extremes(truth, width)
    assert len(extremes) <= buckets
    for b, (mn, mx) in extremes.items():
        got = [v for s, v in loss if s // width == b]
        assert mn in got and mx in got, f"bucket {b} lost its extremes"
    assert body["series"]["lr"] == [[s * 10, pytest.approx(1e-3 / s)] for s in range(1, 11)]
    assert body["downsampled"]["lr"] is False and body["series"]["nope"] == []
    assert body["times"] is None, "only when asked"

    from datetime import UTC, datetime

    logged = {s * 10: datetime.fromtimestamp(1_700_000_000 + s, UTC) for s in range(1, 11)}
    other = submitted(api, name="metrics-times")
    with session_scope() as s:
        crud.add_metric_points(s, other["id"], [(step, "lr", 0.1) for step in logged], logged)
    timed = api.get(f"/jobs/{other['id']}/metrics?names=lr,nope&with_time=true").json()
    assert timed["times"]["lr"] == [1_700_000_000 + s for s in range(1, 11)], "aligned with the series"
    assert timed["times"]["nope"] == []

    window = api.get(f"/jobs/{job['id']}/metrics?names=loss&min_step=3000&max_step=4000&max_points=5000").json()
    assert [p[0] for p in window["series"]["loss"]] == list(range(3000, 4001))
    assert window["downsampled"]["loss"] is False
    zoomed = api.get(f"/jobs/{job['id']}/metrics?names=loss&min_step=2000&max_step=9000&max_points=100").json()
    zsteps = [p[0] for p in zoomed["series"]["loss"]]
    assert len(zsteps) <= 100 and zsteps[0] == 2000 and zsteps[-1] == 9000 and 3_137 in zsteps
    small = api.get(f"/jobs/{job['id']}/metrics?names=loss&max_points=2").json()["series"]["loss"]
    assert len(small) <= 4 and small[0][0] == 1 and small[-1][0] == n
    assert {3_137, 27_777} <= {p[0] for p in small}
    everything = api.get(f"/jobs/{job['id']}/metrics").json()
    assert set(everything["series"]) == {"loss", "lr"} and len(everything["series"]["loss"]) <= 1000


def test_metrics_of_a_million_points_answer_fast(api):
    """1,000,000 stored points (inserted server-side; crud's multi-row INSERT is not meant for bulk loads)."""
    from sqlalchemy import text

    job = submitted(api, name="a million points")
    n = 1_000_000
    with session_scope() as s:
        s.exec(
            text("""
            INSERT INTO metric_points (job_id, name, step, value, ts)
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :n)
            SELECT :job_id, 'loss', x, ((CAST(x AS BIGINT) * 7919) % 10007) / 10007.0, CURRENT_TIMESTAMP FROM c
        """),
            params={"n": n, "job_id": job["id"]},
        )
        s.exec(
            text(
                "UPDATE metric_points SET value = CASE step WHEN 777 THEN 50.0 ELSE -50.0 END "
                "WHERE job_id = :job_id AND name = 'loss' AND step IN (777, 424242)"
            ),
            params={"job_id": job["id"]},
        )
        rollups.rebuild(s, job["id"])  # a bulk load that bypassed crud
    for max_points in (1000, 10_000):
        started = time.perf_counter()
        r = api.get(f"/jobs/{job['id']}/metrics?names=loss&max_points={max_points}")
        elapsed = time.perf_counter() - started
        assert r.status_code == 200
        loss = r.json()["series"]["loss"]
        assert len(loss) <= max_points
        steps = [p[0] for p in loss]
        assert steps == sorted(set(steps)) and steps[0] == 1 and steps[-1] == n
        assert dict((s, v) for s, v in loss)[777] == 50.0 and dict((s, v) for s, v in loss)[424242] == -50.0
        assert elapsed < 5, f"{n} points, max_points={max_points}: {elapsed:.2f}s"


# ---------------------------------------------------------------------------------------------- users


def test_admin_creates_users_and_the_token_is_shown_once(api, caplog):
    caplog.set_level(logging.DEBUG)
    r = api.post("/users", user="root", json={"name": "carol", "is_admin": False})
    assert r.status_code == 201, r.text
    body = r.json()
    token = body["token"]
    assert body["user"]["name"] == "carol" and token.startswith("tp_")
    me = api.client.get(f"{API}/users/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json()["name"] == "carol" and token not in me.text
    assert api.post("/users", user="root", json={"name": "carol"}).status_code == 409
    assert api.post("/users", user="root", json={"name": "bad name!"}).status_code == 422
    users = api.get("/users", user="root").json()
    assert {"root", "alice", "bob", "carol"} <= {u["name"] for u in users["items"]}
    assert "token" not in str(users)
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert token not in logged and api.tokens["root"] not in logged
    assert "/api/v1/users" in logged  # the access log is there, without secrets


# ---------------------------------------------------------------------------------------------- operations


def test_monitoring_dashboard(api, jobs):
    from datetime import timedelta

    from training_platform.core.timeutil import utcnow

    live = submitted(api, name="live worker")["id"]
    dead = submitted(api, name="dead worker")["id"]
    set_status(live, "running", worker="worker-live", heartbeat_at=utcnow())
    set_status(dead, "preflight", worker="worker-dead", heartbeat_at=utcnow() - timedelta(hours=1))
    assert api.client.get(f"{API}/monitoring/dashboard").status_code == 401
    r = api.get("/monitoring/dashboard")
    assert r.status_code == 200
    d = r.json()
    assert set(d["jobs_by_status"]) == {"queued", "preflight", "running", "succeeded", "failed", "cancelled"}
    assert d["jobs_by_status"]["running"] >= 1 and d["jobs_by_status"]["queued"] >= 1
    # A plain user's counts are their own jobs; the queue depth is the aggregate (an admin's counts are everyone's).
    everyone = api.get("/monitoring/dashboard", user="root").json()
    assert d["scope"] == "own" and everyone["scope"] == "all"
    assert d["queue_depth"]["train"] == everyone["jobs_by_status"]["queued"] >= d["jobs_by_status"]["queued"]
    assert isinstance(d["queue_depth"]["broker"], dict) and d["queue_depth"]["broker"]["train"] >= 1
    workers = {w["name"]: w for w in d["workers"]}
    assert workers["worker-live"]["alive"] is True and workers["worker-live"]["job_id"] == live
    assert workers["worker-dead"]["alive"] is False
    assert {"cpu_percent", "memory", "disk"} <= set(d["system"]) and d["system"]["disk"]["path"] == "TP_DATA_DIR"
    assert api.get("/monitoring/dashboard", user="root").json()["system"]["disk"]["path"] == str(api.data_dir)
    assert isinstance(d["gpus"], list)


def test_monitoring_ray_panel(api, monkeypatch):
    """Unset: the panel says so. A cluster that does not answer: the admin sees why, a user only that it failed.
    A real cluster is read in tests/e2e/test_ray_http.py."""
    import socket

    monkeypatch.delenv("TP_RAY_ADDRESS", raising=False)
    assert api.get("/monitoring/ray").json() == {"configured": False}
    assert "tp_ray_nodes 0.0" in api.client.get(f"{API}/metrics").text
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TP_RAY_ADDRESS", f"127.0.0.1:{port}")
    admin = api.get("/monitoring/ray", user="root").json()
    assert admin["configured"] is True and "cannot be reached" in admin["error"]
    user = api.get("/monitoring/ray").json()
    assert user["error"] == "the Ray cluster cannot be read (an admin sees why)" and str(port) not in str(user)
    text = api.client.get(f"{API}/metrics").text
    assert "tp_ray_up 0.0" in text and 'tp_ray_cpus{state="total"} 0.0' in text


def test_health_and_prometheus_metrics(api):
    r = api.client.get(f"{API}/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["database"] == "ok" and r.json()["broker"] == "ok"
    assert api.client.get("/health").status_code == 200
    api.get("/jobs")
    r = api.client.get(f"{API}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    for status in ("queued", "preflight", "running", "succeeded", "failed", "cancelled"):
        assert f'tp_jobs{{status="{status}"}} ' in text
    assert "\ntp_metric_points " in text
    assert 'tp_http_requests_total{method="GET",route="/api/v1/health",status="200"} ' in text
    assert 'tp_http_requests_total{method="GET",route="/api/v1/jobs",status="200"} ' in text
    assert 'tp_http_request_duration_seconds_count{method="GET",route="/api/v1/jobs"} ' in text
    assert "# TYPE tp_http_requests_total counter" in text
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            float(value)


def test_docs_openapi_and_config_schema(api):
    docs = api.client.get("/docs")
    assert docs.status_code == 200
    # Offline machines: Swagger UI's assets come from us, not a CDN.
    assert "cdn." not in docs.text and "https://" not in docs.text.split("<body")[0]
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/static-offline-docs/{asset}" in docs.text
        assert api.client.get(f"/static-offline-docs/{asset}").status_code == 200
    spec = api.client.get(f"{API}/openapi.json").json()
    assert api.client.get("/openapi.json").json() == spec
    for path in (
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/retry",
        "/api/v1/jobs/{job_id}/clone",
        "/api/v1/jobs/{job_id}/metrics",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/jobs/{job_id}/logs/stream",
        "/api/v1/jobs/{job_id}/checkpoints",
        "/api/v1/models",
        "/api/v1/users",
        "/api/v1/users/me",
        "/api/v1/monitoring/dashboard",
        "/api/v1/health",
        "/api/v1/config/schema",
        "/api/v1/evaluations",
        "/api/v1/evaluations/leaderboard",
        "/api/v1/evaluations/{evaluation_id}/samples",
        "/api/v1/schedules",
        "/api/v1/schedules/{schedule_id}",
        "/api/v1/jobs/{job_id}/best_checkpoint",
    ):
        assert path in spec["paths"], path
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert api.client.get(f"{API}/config/schema").status_code == 401  # like every /api/v1 route but health/openapi
    schema = api.get("/config/schema").json()
    assert {"model", "data", "algorithm", "training"} <= set(schema["properties"])


def test_job_detail_shows_launcher_world_size_and_each_rank(api):
    config = valid_config(resources={"num_devices": 2, "device": "cpu"})
    job = api.post("/jobs", json={"name": "two ranks", "config": config})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    dist = api.get(f"/jobs/{job_id}").json()["distributed"]
    assert (dist["launcher"], dist["num_nodes"], dist["processes_per_node"], dist["world_size"]) == (
        "torchrun",
        1,
        2,
        2,
    )
    assert [(r["rank"], r["state"], r["log"]) for r in dist["ranks"]] == [
        (0, "pending", "train.log"),
        (1, "pending", "ranks/rank_1.log"),
    ]

    run_dir = make_run_dir(api.data_dir, job_id, ["step 1"])
    (run_dir / "ranks").mkdir()
    (run_dir / "ranks" / "rank_1.error.json").write_text('{"rank": 1, "message": "rank 1 failed: boom"}')
    set_status(job_id, "running", run_dir=str(run_dir))
    ranks = api.get(f"/jobs/{job_id}").json()["distributed"]["ranks"]
    assert [(r["state"], r["error"]) for r in ranks] == [("running", None), ("failed", "rank 1 failed: boom")]

    one = api.post("/jobs", json={"name": "one", "config": valid_config()}).json()["id"]
    single = api.get(f"/jobs/{one}").json()["distributed"]
    assert (single["launcher"], single["world_size"], len(single["ranks"])) == ("local", 1, 1)
