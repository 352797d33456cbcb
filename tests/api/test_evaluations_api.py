"""/api/v1/evaluations and /api/v1/schedules on SQLite and PostgreSQL: validation with field paths (nothing stored
on error), visibility, an evaluation run by the eval worker's code in this process (results, per-sample records,
leaderboard, delete), checkpoint evaluations attached to checkpoints with the best one kept, schedule CRUD."""

from __future__ import annotations

import shutil
import uuid

import pytest
from sqlalchemy import func
from sqlmodel import select

from training_platform.db import crud
from training_platform.db.models import Checkpoint, EvalMetric, EvalSample, EvalSchedule, Evaluation, Job
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

GSM8K = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 6}
SMALL = {"benchmarks": [GSM8K], "generation": {"max_new_tokens": 4}, "backend": {"num_threads": 1}}


def _counts() -> dict[str, int]:
    with session_scope() as s:
        return {
            m.__name__: s.exec(select(func.count()).select_from(m)).one()
            for m in (Job, Evaluation, EvalMetric, EvalSample, EvalSchedule)
        }


def _locs(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {e["loc"]: e["msg"] for e in response.json()["detail"]}


def _run_queued_evaluations() -> None:
    """What the eval worker does for each wake-up, here in the test process."""
    from training_platform.workers.eval_tasks import EvalJobSupervisor
    from training_platform.workers.supervisor import run_next_job

    while run_next_job("eval", worker="test-worker:1", supervisor_class=EvalJobSupervisor) is not None:
        pass


def _training_job(api, owner: str, steps: list[int]) -> int:
    """A training job row with checkpoints (copies of the demo model), as a training worker leaves them."""
    with session_scope() as s:
        from training_platform.db.models import User

        user = s.get(User, api.user_ids[owner])
        job = crud.create_job(s, owner=user, name="trained", config={"algorithm": {"name": "sft"}})
        run_dir = api.data_dir / "runs" / f"api-eval-job-{job.id}-{uuid.uuid4().hex[:8]}"  # one data dir, two DBs
        job.run_dir = str(run_dir)
        s.add(job)
        for step in steps:
            path = run_dir / "checkpoints" / f"step_{step:06d}"
            shutil.copytree(api.data_dir / "demo" / "model", path)
            s.add(Checkpoint(job_id=job.id, step=step, path=str(path), sha256="0" * 64, size_bytes=1))
        return job.id


def test_bad_submissions_list_every_problem_and_store_nothing(api):
    job_id = _training_job(api, "bob", [10])
    before = _counts()
    cases = [
        ({"benchmarks": ["gsm8k"]}, {"model": "give either"}),
        ({"model": "demo/model", "job_id": job_id, "benchmarks": [GSM8K]}, {"model": "give either"}),
        ({"model": "demo/model", "benchmarks": []}, {"benchmarks": "at least 1"}),
        ({"model": "demo/model", "benchmarks": ["gsm8k"]}, {"benchmarks.0.data": "gsm8k needs a local data file"}),
        (
            {"model": "demo/model", "benchmarks": [{"name": "gsm8k", "data": "escape/passwd"}]},
            {"benchmarks.0.data": "outside the allowed directories"},
        ),
        (
            {"model": "demo/model", "benchmarks": [{"name": "gsm8k", "data": "demo/data/nope.jsonl"}]},
            {"benchmarks.0.data": "no such file"},
        ),
        ({"model": "demo/nope", "benchmarks": [GSM8K]}, {"model": "no model directory"}),
        ({"model": "/etc", "benchmarks": [GSM8K]}, {"model": "outside the allowed directories"}),
        (
            {"model": "demo/model", "benchmarks": [GSM8K, "nope"], "generation": {"temperature": -1}},
            {"benchmarks.1.name": "unknown benchmark 'nope'", "generation.temperature": "must be >= 0.0, got -1.0"},
        ),
        (
            {"model": "demo/model", "benchmarks": [GSM8K], "keep_best_by": "gsm8k/accuracy"},
            {"keep_best_by": "needs job_id"},
        ),
        ({"job_id": job_id, "benchmarks": [GSM8K]}, {"job_id": f"job {job_id} not found"}),  # bob's job
        (
            {"model": "demo/model", "benchmarks": [GSM8K], "backend": {"batch_size": 0, "dtype": 3}},
            {"backend.batch_size": "must be >= 1, got"},
        ),
        ({"model": "demo/model", "benchmarks": [GSM8K], "temprature": 1}, {"temprature": "unknown field"}),
        ({"model": "demo/model", "benchmarks": [GSM8K], "priority": "high"}, {"priority": "integer"}),
        (
            {"model": "demo/model", "benchmarks": ["humaneval"], "sandbox": {"allow_unsandboxed": True}},
            {"sandbox.allow_unsandboxed": "only the operator"},
        ),
    ]
    for body, expected in cases:
        locs = _locs(api.post("/evaluations", json=body))
        for loc, fragment in expected.items():
            assert loc in locs and fragment in locs[loc], (body, locs)
    assert api.post("/evaluations", content=b"{}", headers={"Content-Type": "text/plain"}).status_code == 415
    assert _counts() == before


def test_checkpoint_choices_are_checked(api):
    job_id = _training_job(api, "alice", [10, 20])
    base = {"job_id": job_id, **SMALL}
    assert "available: 10, 20" in _locs(api.post("/evaluations", json={**base, "checkpoint": 15}))["checkpoint"]
    assert "no final model" in _locs(api.post("/evaluations", json={**base, "checkpoint": "final"}))["checkpoint"]
    locs = _locs(api.post("/evaluations", json={**base, "keep_best_by": "gsm8k/acc"}))
    assert locs["keep_best_by"] == "gsm8k reports accuracy, accuracy_strict, accuracy_flexible; not 'acc'"
    with session_scope() as s:
        data_job = crud.create_job(s, owner=_user(s, api, "alice"), name="d", config={}, kind="data")
        data_job_id = data_job.id
    assert "only training jobs" in _locs(api.post("/evaluations", json={**SMALL, "job_id": data_job_id}))["job_id"]


def _user(session, api, name):
    from training_platform.db.models import User

    return session.get(User, api.user_ids[name])


def test_an_evaluation_runs_and_its_results_are_served(api):
    response = api.post("/evaluations", json={"model": "demo/model", "name": "base model", **SMALL})
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["status"] == "queued" and created["model"] == "demo/model" and created["benchmarks"] == ["gsm8k"]
    job = api.get(f"/jobs/{created['id']}").json()
    assert job["kind"] == "eval" and job["max_steps"] == 100
    assert api.get(f"/evaluations/{created['id']}", user="bob").status_code == 404
    assert api.get(f"/evaluations/{created['id']}/samples", user="bob").status_code == 404

    _run_queued_evaluations()
    evaluation = api.get(f"/evaluations/{created['id']}").json()
    assert evaluation["status"] == "succeeded", evaluation["error"]
    assert evaluation["progress"] == 100
    accuracy = evaluation["metrics"]["gsm8k/accuracy"]
    assert accuracy["n"] == 6 and 0.0 <= accuracy["value"] <= 1.0 and len(accuracy["ci95"]) == 2
    assert set(evaluation["metrics"]) == {"gsm8k/accuracy", "gsm8k/accuracy_strict", "gsm8k/accuracy_flexible"}
    assert evaluation["summary"]["benchmarks"]["gsm8k"]["n_items"] == 6
    assert evaluation["config"]["benchmarks"][0]["max_new_tokens"] == 4
    events = [e["to_status"] for e in api.get(f"/jobs/{created['id']}/events").json()]
    assert events == ["queued", "preflight", "running", "succeeded"]
    assert any("gsm8k: 6 items" in line for line in api.get(f"/jobs/{created['id']}/logs").json()["lines"])

    page = api.get(f"/evaluations/{created['id']}/samples", params={"limit": 4, "offset": 2}).json()
    assert page["total"] == 6 and [s["position"] for s in page["items"]] == [2, 3, 4, 5]
    sample = page["items"][0]
    assert sample["prompt"] and sample["reference"] and "latency_s" in sample and "correct_strict" in sample["extra"]
    wrong = api.get(f"/evaluations/{created['id']}/samples", params={"correct": False}).json()
    assert wrong["total"] == round(6 * (1 - accuracy["value"]))
    assert api.get(f"/evaluations/{created['id']}/report").status_code == 200

    board = api.get("/evaluations/leaderboard", params={"benchmark": "gsm8k"}).json()
    entry = next(e for e in board["items"] if e["evaluation_id"] == created["id"])
    assert entry["value"] == accuracy["value"] and entry["data_sha256"] and board["metric"] == "accuracy"
    assert all(
        e["evaluation_id"] != created["id"]
        for e in api.get("/evaluations/leaderboard", params={"benchmark": "gsm8k"}, user="bob").json()["items"]
    ), "bob does not see alice's results"
    assert (
        "unknown benchmark" in _locs(api.get("/evaluations/leaderboard", params={"benchmark": "x"}))["query.benchmark"]
    )
    listed = api.get("/evaluations", params={"benchmark": "gsm8k", "status": "succeeded"}).json()
    assert created["id"] in [e["id"] for e in listed["items"]]

    clone = api.post(f"/jobs/{created['id']}/clone")
    assert clone.status_code == 409 and "only training jobs can be cloned" in clone.json()["detail"]

    # Deleting the evaluation's job removes its results (and its leaderboard entry).
    assert api.delete(f"/jobs/{created['id']}").status_code == 204
    assert api.get(f"/evaluations/{created['id']}").status_code == 404
    with session_scope() as s:
        assert s.exec(select(func.count()).select_from(EvalSample).where(EvalSample.job_id == created["id"])).one() == 0


def test_checkpoint_results_attach_and_the_best_is_kept(api):
    job_id = _training_job(api, "alice", [10, 20, 30])
    ids = []
    for step in (30, 10):
        response = api.post(
            "/evaluations", json={"job_id": job_id, "checkpoint": step, "keep_best_by": "gsm8k/accuracy", **SMALL}
        )
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    with session_scope() as s:
        run_dir = s.get(Job, job_id).run_dir
    from pathlib import Path

    pins = sorted(p.name for p in (Path(run_dir) / "pins").iterdir())
    assert pins == [f"step_000010.eval-{ids[1]}", f"step_000030.eval-{ids[0]}"]  # kept while queued
    _run_queued_evaluations()

    checkpoints = {c["step"]: c for c in api.get(f"/jobs/{job_id}/checkpoints").json()}
    for step, eval_id in ((30, ids[0]), (10, ids[1])):
        assert checkpoints[step]["evaluation_id"] == eval_id
        assert set(checkpoints[step]["eval_metrics"]) >= {"gsm8k/accuracy"}
    assert checkpoints[20]["evaluation_id"] is None and checkpoints[20]["eval_metrics"] == {}
    # The same untrained weights at every step: equal accuracy, so the earliest step is the best.
    job = api.get(f"/jobs/{job_id}").json()
    assert job["best_checkpoint"]["step"] == 10 and job["best_checkpoint"]["metric"] == "gsm8k/accuracy"
    assert checkpoints[10]["is_best"] and not checkpoints[30]["is_best"]
    assert api.get(f"/jobs/{job_id}/best_checkpoint").json() == job["best_checkpoint"]
    assert api.get(f"/jobs/{job_id}/best_checkpoint", params={"metric": "gsm8k/accuracy_strict"}).json()["step"] == 10
    assert api.get(f"/jobs/{job_id}/best_checkpoint", params={"metric": "math/accuracy"}).status_code == 404
    assert sorted(p.name for p in (Path(run_dir) / "pins").iterdir()) == ["step_000010.best"]
    cmp = api.get("/evaluations/compare", params={"a": ids[0], "b": ids[1]}).json()
    assert cmp["benchmarks"]["gsm8k"]["counts"]["fixed"] == 0 and cmp["benchmarks"]["gsm8k"]["same_data"]


def test_schedules_validate_list_update_run_and_delete(api):
    job_id = _training_job(api, "alice", [10])
    cases = [
        ({"name": "x", "trigger": "cron", **SMALL, "model": "demo/model"}, {"cron": "needs `cron`"}),
        (
            {"name": "x", "trigger": "cron", "cron": "61 * * * *", **SMALL, "model": "demo/model"},
            {"cron": "invalid cron expression"},
        ),
        (
            {"name": "x", "trigger": "cron", "cron": "0 3 * *", **SMALL, "model": "demo/model"},
            {"cron": "expected 5 fields"},
        ),
        ({"name": "x", "trigger": "cron", "cron": "0 3 * * *", **SMALL}, {"model": "either `model`"}),
        (
            {"name": "x", "trigger": "cron", "cron": "0 3 * * *", "every_n": 2, "model": "demo/model", **SMALL},
            {"every_n": "only for on_new_checkpoint"},
        ),
        ({"name": "x", "trigger": "on_new_checkpoint", **SMALL}, {"job_id": "give its id"}),
        (
            {"name": "x", "trigger": "on_new_checkpoint", "job_id": job_id, "model": "demo/model", **SMALL},
            {"model": "not a model"},
        ),
        (
            {"name": "x", "trigger": "on_new_checkpoint", "job_id": job_id, "keep_best_by": "math/accuracy", **SMALL},
            {"keep_best_by": "'math' is not evaluated here"},
        ),
        ({"name": "x", "trigger": "weekly", **SMALL}, {"trigger": "cron"}),
        (
            {
                "name": "x",
                "trigger": "on_new_checkpoint",
                "job_id": job_id,
                **SMALL,
                "sandbox": {"allow_unsandboxed": True},
            },
            {"sandbox.allow_unsandboxed": "only the operator"},
        ),
        (
            {
                "name": "x",
                "trigger": "on_new_checkpoint",
                "job_id": job_id,
                "benchmarks": ["humaneval"],
                "generation": {"n_samples": 4},
            },
            {"generation.n_samples": "needs sampling"},
        ),
    ]
    before = _counts()
    for body, expected in cases:
        locs = _locs(api.post("/schedules", json=body))
        for loc, fragment in expected.items():
            assert loc in locs and fragment in locs[loc], (body, locs)
    assert _counts() == before

    response = api.post(
        "/schedules", json={"name": "nightly", "trigger": "cron", "cron": "0  3 * * *", "model": "demo/model", **SMALL}
    )
    assert response.status_code == 201, response.text
    nightly = response.json()
    assert nightly["cron"] == "0 3 * * *" and nightly["next_fire_at"].endswith("03:00:00Z")
    response = api.post(
        "/schedules",
        json={
            "name": "ckpt",
            "trigger": "on_new_checkpoint",
            "job_id": job_id,
            "every_n": 3,
            "keep_best_by": "gsm8k/accuracy",
            **SMALL,
        },
    )
    assert response.status_code == 201, response.text
    on_ckpt = response.json()
    assert on_ckpt["last_checkpoint_step"] == 10, "existing checkpoints are not 'new'"
    assert api.get(f"/schedules/{on_ckpt['id']}", user="bob").status_code == 404
    listed = api.get("/schedules", params={"trigger": "cron"}).json()["items"]
    assert nightly["id"] in [s["id"] for s in listed] and on_ckpt["id"] not in [s["id"] for s in listed]

    patched = api.client.patch(
        f"/api/v1/schedules/{nightly['id']}", headers=api.h("alice"), json={"cron": "30 4 * * *", "enabled": False}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["next_fire_at"].endswith("04:30:00Z") and patched.json()["enabled"] is False
    bad = api.client.patch(f"/api/v1/schedules/{on_ckpt['id']}", headers=api.h("alice"), json={"cron": "* * * * *"})
    assert _locs(bad) == {"cron": "only for cron schedules"}

    ran = api.post(f"/schedules/{on_ckpt['id']}/run")
    assert ran.status_code == 201, ran.text
    evaluation = api.get(f"/evaluations/{ran.json()['evaluation_id']}").json()
    assert evaluation["schedule_id"] == on_ckpt["id"] and evaluation["checkpoint_step"] == 10
    assert api.get(f"/schedules/{on_ckpt['id']}").json()["fired_count"] == 1
    assert api.get("/evaluations", params={"schedule_id": on_ckpt["id"]}).json()["total"] == 1
    _run_queued_evaluations()

    # Checkpoints saved while a schedule was disabled do not fire in a burst when it is enabled again.
    patch = api.client.patch
    assert (
        patch(f"/api/v1/schedules/{on_ckpt['id']}", headers=api.h("alice"), json={"enabled": False}).json()["enabled"]
        is False
    )
    with session_scope() as s:
        s.add(Checkpoint(job_id=job_id, step=20, path="/nowhere/step_000020", sha256="0" * 64, size_bytes=1))
    enabled = patch(f"/api/v1/schedules/{on_ckpt['id']}", headers=api.h("alice"), json={"enabled": True}).json()
    assert enabled["enabled"] is True and enabled["last_checkpoint_step"] == 20

    assert api.delete(f"/schedules/{on_ckpt['id']}").status_code == 204
    assert api.get(f"/schedules/{on_ckpt['id']}").status_code == 404
    assert api.get(f"/evaluations/{evaluation['id']}").status_code == 200, "its evaluations stay"


def test_evaluations_are_paginated_newest_first(api):
    ids = [
        api.post("/evaluations", json={"model": "demo/model", "name": f"page {i}", **SMALL}).json()["id"]
        for i in range(3)
    ]
    everything = api.get("/evaluations", params={"limit": 200}).json()
    assert [e["id"] for e in everything["items"][:3]] == ids[::-1] and everything["total"] >= 3
    page = api.get("/evaluations", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == everything["total"] and [e["id"] for e in page["items"]] == [ids[1], ids[0]]
    by_benchmark = api.get("/evaluations", params={"limit": 1, "offset": 1, "benchmark": "gsm8k"}).json()
    assert by_benchmark["items"][0]["id"] == ids[1]
    assert api.get("/evaluations", params={"benchmark": "humaneval"}).json()["total"] == 0
    assert api.get("/evaluations", user="bob").json()["total"] == 0
    _run_queued_evaluations()


def test_the_benchmark_list_is_the_registry(api):
    """The UI's pickers read this list: a benchmark registered in evaluation/benchmarks/ shows up without a
    front-end change."""
    from training_platform.evaluation.benchmarks import BENCHMARKS

    listed = api.get("/evaluations/benchmarks")
    assert listed.status_code == 200, listed.text
    by_name = {b["name"]: b for b in listed.json()}
    assert sorted(by_name) == sorted(BENCHMARKS)
    assert by_name["humaneval"]["primary_metric"] == "pass@1" and by_name["humaneval"]["bundled_data"] is True
    assert by_name["gsm8k"]["bundled_data"] is False and "####" in by_name["gsm8k"]["data_help"]
    assert by_name["multiple_choice"]["kind"] == "loglikelihood"
    assert api.get("/evaluations/benchmarks", headers={"Authorization": ""}).status_code == 401


def test_the_request_schemas_type_every_benchmarks_options_and_the_generation_defaults(api):
    """GET /evaluations/schema and /schedules/schema: the forms are generated from them, so a benchmark's own options
    (from its params model) and the generation defaults' bounds and help come from the server."""
    from training_platform.evaluation.benchmarks import BENCHMARKS

    evaluation = api.get("/evaluations/schema")
    schedule = api.get("/schedules/schema")
    assert evaluation.status_code == 200 and schedule.status_code == 200, (evaluation.text, schedule.text)
    for schema in (evaluation.json(), schedule.json()):
        names, objects = schema["properties"]["benchmarks"]["items"]["anyOf"]
        assert names["enum"] == sorted(BENCHMARKS)
        mapping = objects["discriminator"]["mapping"]
        assert sorted(mapping) == sorted(BENCHMARKS) and mapping["math"] == mapping["math500"]
        defs = schema["$defs"]
        for name, ref in mapping.items():
            params = defs[ref.rsplit("/", 1)[-1]]["properties"]
            assert name in str(params["name"]) and {"data", "limit", "n_samples", "k"} <= set(params)
            assert params["limit"]["anyOf"][0]["minimum"] == 1
            assert params["max_new_tokens"]["default"] == BENCHMARKS[name].default_max_new_tokens
        humaneval = defs[mapping["humaneval"].rsplit("/", 1)[-1]]["properties"]
        assert {"mode", "timeout_s"} <= set(humaneval)
        generation = defs["GenerationDefaults"]["properties"]
        assert generation["temperature"]["default"] == 0.0
        assert generation["temperature"]["anyOf"][0]["maximum"] == 5.0
        assert "gsm8k 256" in generation["max_new_tokens"]["description"]
        assert generation["limit"]["description"] == "Evaluate the first N items."
    assert {"model", "job_id", "checkpoint", "keep_best_by", "generation"} <= set(evaluation.json()["properties"])
    assert schedule.json()["properties"]["trigger"]["enum"] == ["cron", "on_new_checkpoint"]
    assert api.get("/evaluations/schema", headers={"Authorization": ""}).status_code == 401
    assert api.get("/schedules/schema", headers={"Authorization": ""}).status_code == 401
