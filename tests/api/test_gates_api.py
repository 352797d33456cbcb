"""Quality gates over HTTP: profile rights and validation, a `gate` data job storing its report, the 0008 migration,
and a training job with `data.gate: {profile: strict}` refused by the worker's preflight (naming the failing
checks), then started after an admin's override (the real worker code path: JobSupervisor + `tp train` child)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from api_helpers import database, ingested, run_data_job, valid_config
from sqlalchemy import inspect, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from test_gate import _variant, good_rows  # noqa: E402 - the crafted datasets of the unit tests

from training_platform.db.migrate import alembic_config, upgrade  # noqa: E402
from training_platform.db.models import GateProfileRecord, GateReportRecord  # noqa: E402
from training_platform.db.session import make_engine  # noqa: E402

pytestmark = pytest.mark.integration


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _upload(api, rows, name: str, user: str = "alice") -> dict:
    r = api.post(
        "/datasets",
        user=user,
        files={"file": ("d.jsonl", _jsonl(rows), "application/octet-stream")},
        data={"name": name},
    )
    return ingested(api, r, user)


def run_train_job(job_id: int) -> None:
    """Claim the queued training job `job_id` and run it here with the worker's supervisor (preflight, `tp train`
    child process, ingest, end state), as a Celery worker would."""
    from sqlalchemy import update

    from training_platform.core.timeutil import utcnow
    from training_platform.db.models import Job, JobEvent
    from training_platform.db.session import session_scope
    from training_platform.workers.supervisor import JobSupervisor

    worker = "in-test@local"
    with session_scope() as session:
        claimed = session.exec(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued")
            .values(
                status="preflight", worker=worker, heartbeat_at=utcnow(), attempts=Job.attempts + 1, updated_at=utcnow()
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        assert claimed, f"job {job_id} is not queued"
        session.add(JobEvent(job_id=job_id, from_status="queued", to_status="preflight", reason=f"claimed by {worker}"))
    JobSupervisor(job_id, worker).run()


# ---------------------------------------------------------------------------------------------- profiles


def test_profiles_builtin_read_only_admin_crud(sqlite_api):
    api = sqlite_api
    names = {p["name"]: p for p in api.get("/gate-profiles", user="bob").json()["items"]}
    assert {"default", "strict"} <= set(names) and names["strict"]["source"] == "builtin"
    assert names["strict"]["checks"]["difficulty_mix"] == {"min_hard": 0.3, "max_easy": 0.3}
    for method in (api.delete,):
        assert method("/gate-profiles/strict", user="root").status_code == 409
    assert (
        api.client.put(
            "/api/v1/gate-profiles/default", headers=api.h("root"), json={"checks": {"schema": {}}}
        ).status_code
        == 409
    )
    assert api.post("/gate-profiles", user="root", json={"name": "strict", "checks": {"schema": {}}}).status_code == 409
    r = api.post(
        "/gate-profiles", user="root", json={"name": "team", "checks": {"nope": {}, "duplicates": {"max_rate": 7}}}
    )
    assert r.status_code == 422
    locs = {tuple(d["loc"]) if isinstance(d["loc"], list) else d["loc"] for d in r.json()["detail"]}
    assert any("checks.nope" in str(loc) for loc in locs) and any("max_rate" in str(loc) for loc in locs)
    assert api.post("/gate-profiles", user="alice", json={"name": "team", "checks": {"schema": {}}}).status_code == 403
    r = api.post("/gate-profiles", user="root", json={"name": "team", "checks": {"duplicates": {"max_rate": 0.1}}})
    assert r.status_code == 201, r.text
    first_hash = r.json()["hash"]
    assert r.json()["checks"]["duplicates"]["threshold"] == 0.8  # defaults filled in
    assert api.post("/gate-profiles", user="root", json={"name": "team", "checks": {"schema": {}}}).status_code == 409
    r = api.client.put(
        "/api/v1/gate-profiles/team", headers=api.h("root"), json={"checks": {"duplicates": {"max_rate": 0.2}}}
    )
    assert r.status_code == 200 and r.json()["hash"] != first_hash
    assert api.get("/gate-profiles/team", user="bob").json()["source"] == "admin"
    assert api.delete("/gate-profiles/team", user="alice").status_code == 403
    assert api.delete("/gate-profiles/team", user="root").status_code == 204
    assert api.get("/gate-profiles/team").status_code == 404


def test_file_profiles_are_read_only(sqlite_api, tmp_path):
    from training_platform.core.settings import get_settings

    f = tmp_path / "gates.yaml"
    f.write_text("profiles:\n  ops:\n    checks:\n      schema: {}\n")
    settings = get_settings()
    old = settings.gate_profiles_file
    settings.gate_profiles_file = str(f)
    try:
        assert sqlite_api.get("/gate-profiles/ops").json()["source"] == "file"
        assert sqlite_api.delete("/gate-profiles/ops", user="root").status_code == 409
    finally:
        settings.gate_profiles_file = old


# ---------------------------------------------------------------------------------------------- gate jobs


def test_gate_job_stores_a_report(sqlite_api):
    from api_helpers import run_data_job

    api = sqlite_api
    eval_path = api.data_dir / "users" / "alice"
    eval_path.mkdir(parents=True, exist_ok=True)
    (eval_path / "eval.jsonl").write_text(_jsonl([{"prompt": "a b c d e f g h i j", "completion": "x"}]).decode())
    body = _upload(api, good_rows(), "gate-good")
    ds, v = body["dataset"]["id"], body["version"]["id"]
    base = f"/datasets/{ds}/versions/{v}"
    # bad input: 422 with field paths (unknown profile, another user's / missing files), bounded eval sets
    r = api.post(f"{base}/gate", json={"profile": "nope", "eval_sets": ["users/bob/x.jsonl", "demo/none.jsonl"]})
    assert r.status_code == 422
    locs = {str(d["loc"]) for d in r.json()["detail"]}
    assert any("profile" in loc for loc in locs) and any("eval_sets" in loc for loc in locs), locs
    assert api.post(f"{base}/gate", json={"eval_sets": ["x.jsonl"] * 21}).status_code == 422
    assert api.post(f"{base}/gate", user="bob", json={}).status_code == 404
    r = api.post(f"{base}/gate", json={"profile": "default", "eval_sets": ["users/alice/eval.jsonl"]})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    run_data_job(job_id)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job
    result = job["config"]["result"]
    assert result["passed"] is True and "leakage" not in result["skipped"]
    items = api.get(f"{base}/gate-reports").json()["items"]
    assert items[0]["id"] == result["report_id"] and items[0]["passed"]
    report = api.get(f"{base}/gate-reports/{items[0]['id']}").json()["report"]
    assert report["dataset"]["sha256"] == body["version"]["sha256"]
    assert report["profile"]["name"] == "default" and len(report["profile"]["hash"]) == 64
    assert {c["name"] for c in report["checks"]} >= {"schema", "duplicates", "leakage"}
    assert all({"value", "threshold", "verdict"} <= set(c) for c in report["checks"]) and report["created_at"]
    assert api.get(f"{base}/gate-reports", user="bob").status_code == 404


# ---------------------------------------------------------------------------------------------- migration


def test_an_unknown_gate_profile_is_refused_at_submission(sqlite_api):
    config = valid_config(data={"train_file": "demo/data/sft.jsonl", "gate": {"profile": "no-such-profile"}})
    r = sqlite_api.post("/jobs", user="alice", json={"name": "gated", "config": config})
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["msg"].split(";")[0]) for e in r.json()["detail"]] == [
        ("data.gate.profile", "unknown gate profile 'no-such-profile'")
    ]
    out = sqlite_api.post("/jobs/validate", user="alice", json={"config": config}).json()
    assert [e["loc"] for e in out["errors"]] == [["data", "gate", "profile"]]
    config["data"]["gate"]["profile"] = "strict"
    assert sqlite_api.post("/jobs/validate", user="alice", json={"config": config}).json()["valid"]


def test_single_head_after_0008():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_revision("0008").down_revision == "0007"
    assert len(script.get_heads()) == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0008_up_down(kind, tmp_path):
    from alembic import command

    with database(kind, tmp_path) as url:
        upgrade(url, "0007")
        engine = make_engine(url)
        try:
            assert "gate_reports" not in inspect(engine).get_table_names()
            upgrade(url, "0008")
            assert {c["name"] for c in inspect(engine).get_columns("gate_profiles")} == set(
                GateProfileRecord.model_fields
            )
            assert {c["name"] for c in inspect(engine).get_columns("gate_reports")} == set(
                GateReportRecord.model_fields
            )
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO gate_reports (dataset_version_id, sha256, profile_name, profile_hash, "
                        "passed, report, created_at) VALUES (1, 's', 'strict', 'h', true, '{}', "
                        "CURRENT_TIMESTAMP)"
                    )
                )
            command.downgrade(alembic_config(url), "0007")
            assert "gate_reports" not in inspect(engine).get_table_names()
            assert "gate_profiles" not in inspect(engine).get_table_names()
            upgrade(url, "head")
        finally:
            engine.dispose()


# ---------------------------------------------------------------------------------------------- the training gate


def test_training_refused_by_the_gate_then_started_after_an_admin_override(sqlite_api):
    api = sqlite_api
    rows, _ = _variant("duplicates", {})
    body = _upload(api, rows, "gate-dups")
    version = body["version"]
    config = valid_config(training={"max_steps": 1, "per_device_batch_size": 2, "save_steps": 1, "logging_steps": 1})
    config["data"] = {"train_file": version["path"], "max_length": 512, "gate": {"profile": "strict"}}
    # /jobs/validate never runs the gate: with no stored report for this content it says the preflight will
    checked = api.post("/jobs/validate", json={"config": config}).json()
    assert checked["valid"] is True and any("no stored 'strict' report" in w for w in checked["warnings"]), checked
    r = api.post("/jobs", json={"name": "gated", "config": config})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    run_train_job(job_id)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["status"] == "failed", job
    assert "data.gate" in job["error"] and "duplicates" in job["error"], job["error"]
    errors = job["preflight"]["errors"]
    assert errors[0]["loc"] == "data.gate" and "duplicates" in errors[0]["msg"]
    assert "difficulty_mix" not in errors[0]["msg"]  # only the failing checks are named
    reports = api.get(f"/datasets/{body['dataset']['id']}/versions/{version['id']}/gate-reports").json()["items"]
    assert reports[0]["job_id"] == job_id and reports[0]["failed"] == ["duplicates"]
    # ... and once a failing report is stored for this content, the form's check refuses it at data.gate
    checked = api.post("/jobs/validate", json={"config": config}).json()
    assert checked["valid"] is False, checked
    [problem] = checked["errors"]
    assert problem["loc"] == ["data", "gate"] and "duplicates" in problem["msg"], problem

    # the override: admins only, a reason required
    assert api.post(f"/jobs/{job_id}/gate-override", json={"reason": "known dups"}).status_code == 403
    assert api.post(f"/jobs/{job_id}/gate-override", user="root", json={}).status_code == 422
    assert api.post(f"/jobs/{job_id}/gate-override", user="root", json={"reason": "x" * 3000}).status_code == 422
    r = api.post(f"/jobs/{job_id}/gate-override", user="root", json={"reason": "duplicates are intended here"})
    assert r.status_code == 200 and r.json()["status"] == "queued", r.text
    events = api.get(f"/jobs/{job_id}/events").json()
    events = events["items"] if isinstance(events, dict) else events
    assert any("gate override by root: duplicates are intended here" in e["reason"] for e in events)

    run_train_job(job_id)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["status"] == "succeeded", (job["error"], job["preflight"])
    gate_check = next(c for c in job["preflight"]["checks"] if c["name"] == "gate")
    assert gate_check["ok"] and "overridden by root" in gate_check["detail"]
    run_dir = Path(job["run_dir"])
    override = json.loads((run_dir / "gate_override.json").read_text())
    assert override["by"] == "root" and override["reason"] == "duplicates are intended here"
    assert override["failed_checks"] == ["duplicates"]
    kept = json.loads((run_dir / "gates" / "strict.json").read_text())
    assert kept["dataset"]["sha256"] == version["sha256"] and kept["failed"] == ["duplicates"]
    manifest = [json.loads(line) for line in (run_dir / "manifest.jsonl").read_text().splitlines()]
    kinds = {e.get("kind") for e in manifest}
    assert {"gate_report", "gate_override"} <= kinds, kinds


def test_a_profile_with_reward_shadow_needs_the_owners_passing_shadow_report(sqlite_api, data_dir):
    """An admin profile with the `reward_shadow` check: a GRPO job's preflight (the worker's code) refuses its rewards
    until its owner has a succeeded shadow test whose new scorer is exactly that reward set; another user's report
    does not count. The approving report is handed to the run (reward_shadow.json)."""
    from training_platform.workers.gate import gate_dir, run_preflight

    api = sqlite_api
    r = api.post(
        "/gate-profiles",
        user="root",
        json={"name": "shadowed", "checks": {"schema": {}, "reward_shadow": {"min_spearman": 0.9}}},
    )
    assert r.status_code == 201, r.text
    rewards = [
        {"name": "math_answer", "weight": 1.0},
        {"name": "length_penalty", "weight": 0.1, "params": {"max_length": 8, "buffer": 4}},
    ]
    config = valid_config(
        algorithm={"name": "grpo", "num_generations": 2, "max_completion_length": 8},
        rewards=rewards,
        training={"max_steps": 1, "per_device_batch_size": 2},
    )
    config["data"] = {"train_file": "demo/data/rl.jsonl", "max_length": 64, "gate": {"profile": "shadowed"}}

    def preflight(user: str) -> tuple[int, dict]:
        r = api.post("/jobs", user=user, json={"name": "shadow-gated", "config": config})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        return job_id, run_preflight(config, data_dir=data_dir, min_free_disk_mb=1, job_id=job_id)

    _, report = preflight("alice")
    assert not report["ok"]
    assert [e["loc"] for e in report["errors"]] == ["rewards"], report["errors"]
    assert "'shadowed' requires a passing reward shadow report" in report["errors"][0]["msg"]
    assert "no succeeded shadow test" in report["errors"][0]["msg"]

    # alice's shadow test: completions within the length budget, so new ranks exactly as old (spearman 1)
    items = [
        {"prompt": f"What is {i} + {i}?", "completion": str(2 * i if i % 3 else 2 * i + 1), "answer": str(2 * i)}
        for i in range(30)
    ]
    upload = _upload(api, items, "shadow-items")
    r = api.post(
        "/rewards/shadow",
        json={
            "old": "math_answer",
            "new": json.dumps(rewards),
            "repeats": 1,
            "dataset_id": upload["dataset"]["id"],
            "version_id": upload["version"]["id"],
        },
    )
    assert r.status_code == 202, r.text
    run_data_job(r.json()["id"])
    shadow_job = api.get(f"/jobs/{r.json()['id']}").json()
    assert shadow_job["status"] == "succeeded", shadow_job
    assert shadow_job["config"]["result"]["verdict"] == "pass" and shadow_job["config"]["result"]["spearman"] == 1.0

    job_id, report = preflight("alice")
    assert report["ok"], report["errors"]
    gate = next(c for c in report["checks"] if c["name"] == "gate")
    assert f"approved by shadow test job {shadow_job['id']}" in gate["detail"]
    handed = json.loads((gate_dir(data_dir, job_id) / "reward_shadow.json").read_text())
    assert handed["shadow_job_id"] == shadow_job["id"] and handed["verdict"] == "pass"

    _, report = preflight("bob")  # alice's approval is hers
    assert not report["ok"] and report["errors"][0]["loc"] == "rewards"
