"""DELETE /api/v1/jobs/{id} on SQLite and PostgreSQL: ids are never reused, the job's files go (runs/job-N/,
runs/job-N.{config.yaml,console.log,lock}, earlier attempts, evals/job-N/, the pins it holds) except under the
stated retention rule (a registered model's directory), and a schedule on the job is disabled with a message."""

from __future__ import annotations

import shutil

import pytest
from api_helpers import set_status, valid_config

from training_platform.db import crud
from training_platform.db.models import Checkpoint, RegisteredModel, User
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

SMALL_EVAL = {
    "benchmarks": [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 2}],
    "generation": {"max_new_tokens": 2},
    "backend": {"num_threads": 1},
}


def _submit(api, name: str = "job") -> int:
    response = api.post("/jobs", json={"name": name, "config": valid_config()})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _leave_files(data_dir, job_id: int) -> dict[str, object]:
    """The files a worker leaves for a training job (see workers/supervisor.py), freshly made."""
    runs = data_dir / "runs"
    run = runs / f"job-{job_id}"
    shutil.rmtree(run, ignore_errors=True)
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "checkpoints" / "step_000002" / "model.safetensors").write_bytes(b"x" * 8)
    (run / "final").mkdir()
    (run / "final" / "config.json").write_text("{}")
    (run / "pins").mkdir()
    (run / "pins" / "step_000002.best").touch()
    files = {"run": run, "attempt": runs / f"job-{job_id}.attempt-1"}
    files["attempt"].mkdir(exist_ok=True)
    for suffix in ("config.yaml", "console.log", "lock"):
        files[suffix] = runs / f"job-{job_id}.{suffix}"
        files[suffix].write_text("x\n")
    return files


def test_ids_are_never_reused_after_a_delete(api):
    ids = [_submit(api, f"id {i}") for i in range(3)]
    assert ids == list(range(ids[0], ids[0] + 3))
    assert api.post(f"/jobs/{ids[2]}/cancel").status_code == 200
    assert api.delete(f"/jobs/{ids[2]}").status_code == 204
    assert _submit(api, "after the delete") == ids[2] + 1
    for job_id in ids[:2]:
        api.post(f"/jobs/{job_id}/cancel")


def test_delete_removes_every_file_of_the_job(api):
    job_id = _submit(api, "files")
    files = _leave_files(api.data_dir, job_id)
    set_status(job_id, "succeeded", run_dir=str(files["run"]))
    other = api.data_dir / "runs" / f"job-{job_id}0.console.log"  # another job's file with a similar name
    other.write_text("keep\n")

    response = api.delete(f"/jobs/{job_id}")
    assert response.status_code == 204, response.text
    assert "x-tp-kept-files" not in response.headers
    for name, path in files.items():
        assert not path.exists(), f"{name}: {path} survived the delete"
    assert other.exists()
    other.unlink()


def test_delete_keeps_a_registered_models_directory_and_says_so(api):
    job_id = _submit(api, "registered final")
    files = _leave_files(api.data_dir, job_id)
    set_status(job_id, "succeeded", run_dir=str(files["run"]))
    with session_scope() as s:
        model = RegisteredModel(
            name=f"from-job-{job_id}", path=str(files["run"] / "final"), owner_id=api.user_ids["alice"]
        )
        s.add(model)

    response = api.delete(f"/jobs/{job_id}")
    assert response.status_code == 204, response.text
    kept = response.headers["x-tp-kept-files"]
    assert kept == f"runs/job-{job_id}/final (registered model 'from-job-{job_id}' points here)"
    assert (files["run"] / "final" / "config.json").is_file()
    assert not (files["run"] / "checkpoints").exists() and not (files["run"] / "pins").exists()
    for name in ("attempt", "config.yaml", "console.log", "lock"):
        assert not files[name].exists(), name
    with session_scope() as s:
        s.delete(s.get(RegisteredModel, model.id))
    shutil.rmtree(files["run"])


def test_delete_of_an_evaluation_removes_its_output_and_its_pin(api):
    data_dir = api.data_dir
    with session_scope() as s:
        trained = crud.create_job(
            s, owner=s.get(User, api.user_ids["alice"]), name="trained", config={"algorithm": {"name": "sft"}}
        )
        train_id = trained.id
    run = data_dir / "runs" / f"job-{train_id}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(data_dir / "demo" / "model", run / "checkpoints" / "step_000004")
    set_status(train_id, "succeeded", run_dir=str(run))
    with session_scope() as s:
        s.add(
            Checkpoint(
                job_id=train_id, step=4, path=str(run / "checkpoints" / "step_000004"), sha256="0" * 64, size_bytes=1
            )
        )
    created = api.post("/evaluations", json={"job_id": train_id, "checkpoint": 4, **SMALL_EVAL})
    assert created.status_code == 201, created.text
    eval_id = created.json()["id"]
    assert (run / "pins" / f"step_000004.eval-{eval_id}").exists()
    assert api.post(f"/jobs/{eval_id}/cancel").status_code == 200
    out = data_dir / "evals" / f"job-{eval_id}"
    (out / "samples").mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text("{}")

    assert api.delete(f"/jobs/{eval_id}").status_code == 204
    assert not out.exists()
    assert not (run / "pins" / f"step_000004.eval-{eval_id}").exists()
    assert (run / "checkpoints" / "step_000004").is_dir()  # the evaluated job's files are not the evaluation's

    assert api.delete(f"/jobs/{train_id}").status_code == 204
    assert not run.exists()


def test_a_schedule_of_a_deleted_job_is_disabled_with_a_message(api):
    job_id = _submit(api, "watched")
    files = _leave_files(api.data_dir, job_id)
    set_status(job_id, "succeeded", run_dir=str(files["run"]))
    created = api.post(
        "/schedules", json={"name": "on ckpt", "trigger": "on_new_checkpoint", "job_id": job_id, **SMALL_EVAL}
    )
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    assert created.json()["enabled"] is True

    assert api.delete(f"/jobs/{job_id}").status_code == 204
    schedule = api.get(f"/schedules/{schedule_id}").json()
    assert schedule["enabled"] is False
    assert f"job {job_id} was deleted by alice; schedule disabled" in schedule["last_message"]
    # A later job never gets the deleted job's id, so the schedule cannot fire on someone else's job.
    assert _submit(api, "next") > job_id
    # ...and it cannot be switched back on: its job is gone.
    r = api.patch(f"/schedules/{schedule_id}", json={"enabled": True})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "enabled" and f"job {job_id} was deleted" in r.json()["detail"][0]["msg"]
    assert api.get(f"/schedules/{schedule_id}").json()["enabled"] is False
