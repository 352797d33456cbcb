"""The path-escape suite: every way out of the caller's areas (a symlink out of the data dir, `..`, an absolute path,
another user's run, dataset file or evaluation directory, an over-long component) is refused at submission with a
422 naming the field, through every kind of request that names a path (training config, evaluation, registered
model, dataset registration, data operation); a path planted after submission (a symlink swapped in, a dataset
unshared) is refused again by the worker before it opens anything. Error messages never show the server's data
directory. Also: sharing a model or dataset opens it to other users (read and use, never change).

alice is the caller, bob the other user, root the admin. On SQLite, in a data directory of its own (exact
`runs/job-N` names).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from api_helpers import database, ingested, running_api, set_status, valid_config

from training_platform.db import crud
from training_platform.db.models import Evaluation, Job, JobStatus, User
from training_platform.db.session import session_scope
from training_platform.services import jobs as job_service

pytestmark = pytest.mark.integration

SFT_ROW = {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}
CUSTOM_ROW = {"question": "1+1?", "answer": "2"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, redis_client, data_dir):
    """A private TP_DATA_DIR: demo/ linked to the session's demo assets, escape -> /etc; bob's finished training
    run (runs/job-N/final + a data file) and evaluation (evals/job-M/samples); an API on a fresh SQLite DB."""
    root = tmp_path_factory.mktemp("tp_escape").resolve()
    (root / "demo").symlink_to(data_dir / "demo")
    (root / "escape").symlink_to("/etc")
    with database("sqlite", tmp_path_factory.mktemp("db_escape")) as url, running_api(root, url) as api:
        with session_scope() as s:
            bob = s.get(User, api.user_ids["bob"])
            bob_run = crud.create_job(s, owner=bob, name="bob's run", config=valid_config()).id
            bob_eval = crud.create_job(s, owner=bob, name="bob's eval", config={}, kind="eval").id
        run = root / "runs" / f"job-{bob_run}"
        shutil.copytree(root / "demo" / "model", run / "final")
        (run / "secret.jsonl").write_text(json.dumps(SFT_ROW) + "\n")
        set_status(bob_run, "succeeded", run_dir=str(run))
        samples = root / "evals" / f"job-{bob_eval}" / "samples"
        samples.mkdir(parents=True)
        (samples / "gsm8k.jsonl").write_text(json.dumps(CUSTOM_ROW) + "\n")
        set_status(bob_eval, "succeeded", run_dir=str(samples.parent))
        api.bob_run, api.bob_eval = bob_run, bob_eval
        mine = root / "users" / "alice"
        mine.mkdir(parents=True)
        (mine / "train.jsonl").write_text(json.dumps(SFT_ROW) + "\n")
        (mine / "bench.jsonl").write_text(json.dumps(CUSTOM_ROW) + "\n")
        yield api


def _detail(r) -> dict[str, str]:
    assert r.status_code == 422, r.text
    return {d["loc"]: d["msg"] for d in r.json()["detail"]}


def _refused(api, r, loc: str) -> str:
    """A 422 naming `loc`, without the server's data directory in the body."""
    msgs = _detail(r)
    assert loc in msgs, msgs
    assert str(api.data_dir) not in r.text, r.text
    return msgs[loc]


def _bob_dataset_file(api, name: str = "bobs-set") -> tuple[int, str]:
    row = {"messages": [{"role": "user", "content": f"{name}?"}, {"role": "assistant", "content": "x"}]}
    r = api.post(
        "/datasets",
        user="bob",
        files={"file": ("b.jsonl", json.dumps(row).encode() + b"\n", "application/octet-stream")},
        data={"name": name},
    )
    body = ingested(api, r, "bob")  # 202: the ingest data job, run here
    return body["dataset"]["id"], body["version"]["path"]


def _escapes(api) -> dict[str, str]:
    dataset_path = _bob_dataset_file(api, "escape-src")[1]
    return {
        "symlink-out": "escape/passwd",
        "dotdot": "../../../../etc/passwd",
        "dotdot-inside": "demo/../../../etc/passwd",
        "absolute": "/etc/passwd",
        "absolute-inside-other-run": str(api.data_dir / "runs" / f"job-{api.bob_run}" / "secret.jsonl"),
        "other-run": f"runs/job-{api.bob_run}/secret.jsonl",
        "other-run-dotdot": f"users/alice/../../runs/job-{api.bob_run}/secret.jsonl",
        "other-dataset-file": dataset_path,
        "other-eval-dir": f"evals/job-{api.bob_eval}/samples/gsm8k.jsonl",
        "platform-files": "platform.db",
        "long-component": "users/alice/" + "x" * 256 + ".jsonl",
        "long-path": "users/alice/" + "/".join(["d" * 200] * 21) + ".jsonl",
    }


ESCAPE_CASES = [
    "symlink-out",
    "dotdot",
    "dotdot-inside",
    "absolute",
    "absolute-inside-other-run",
    "other-run",
    "other-run-dotdot",
    "other-dataset-file",
    "other-eval-dir",
    "platform-files",
    "long-component",
    "long-path",
]


@pytest.mark.parametrize("case", ESCAPE_CASES)
def test_training_data_files_are_refused(env, case):
    path = _escapes(env)[case]
    for field in ("train_file", "eval_file"):
        cfg = valid_config()
        cfg["data"][field] = path
        r = env.post("/jobs", json={"name": "escape", "config": cfg})
        _refused(env, r, f"data.{field}")


@pytest.mark.parametrize("case", ["symlink-out", "absolute", "other-run", "other-eval-dir", "long-component"])
def test_model_paths_are_refused(env, case):
    path = {
        **_escapes(env),
        "other-run": f"runs/job-{env.bob_run}/final",
        "other-eval-dir": f"evals/job-{env.bob_eval}",
    }[case]
    _refused(env, env.post("/jobs", json={"name": "x", "config": valid_config(model={"path": path})}), "model.path")
    ppo = valid_config(algorithm={"name": "ppo", "reward_model_path": path, "value_model_path": path})
    msgs = _detail(env.post("/jobs", json={"name": "x", "config": ppo}))
    assert {"algorithm.reward_model_path", "algorithm.value_model_path"} <= set(msgs), msgs
    _refused(env, env.post("/models", json={"name": "stolen", "path": path}), "path")
    _refused(
        env,
        env.post(
            "/evaluations",
            json={
                "model": path,
                "benchmarks": [{"name": "custom", "data": "users/alice/bench.jsonl", "scorer": "exact"}],
            },
        ),
        "model",
    )


@pytest.mark.parametrize("case", ESCAPE_CASES)
def test_benchmark_and_fewshot_files_are_refused(env, case):
    path = _escapes(env)[case]
    for field in ("data", "fewshot_data"):
        bench = {"name": "custom", "data": "users/alice/bench.jsonl", "scorer": "exact", field: path}
        if field == "fewshot_data":
            bench["n_shot"] = 1
        body = {"model": "demo/model", "benchmarks": [bench]}
        _refused(env, env.post("/evaluations", json=body), f"benchmarks.0.{field}")
        r = env.post("/schedules", json={"name": "s", "trigger": "cron", "cron": "0 3 * * *", **body})
        _refused(env, r, f"benchmarks.0.{field}")


@pytest.mark.parametrize("case", ESCAPE_CASES)
def test_dataset_registration_and_operation_paths_are_refused(env, case):
    path = _escapes(env)[case]
    _refused(env, env.post("/datasets/register", json={"name": "stolen", "path": path}), "path")
    r = env.post(
        "/datasets",
        files={"file": ("a.jsonl", json.dumps(SFT_ROW).encode() + b"\n", "application/octet-stream")},
        data={"name": "alices-set"},
    )
    body = ingested(env, r)
    dataset, version = body["dataset"]["id"], body["version"]["id"]
    url = f"/datasets/{dataset}/versions/{version}/operations"
    _refused(
        env, env.post(url, json={"operation": "decontaminate", "params": {"eval_sets": [path]}}), "params.eval_sets[0]"
    )
    if case in ("symlink-out", "absolute", "other-run", "long-component"):
        model = {**_escapes(env), "other-run": f"runs/job-{env.bob_run}/final"}[case]
        _refused(
            env,
            env.post(url, json={"operation": "score", "params": {"perplexity_model": model}}),
            "params.perplexity_model",
        )
        recipe = {"operators": [{"op": "length_filter", "unit": "tokens", "min": 1, "tokenizer": model}]}
        msgs = _detail(env.post(url, json={"operation": "clean", "params": {"recipe": recipe}}))
        assert any(loc.startswith("params.recipe.operators[0]") for loc in msgs), msgs


def test_another_users_registered_model_name_is_not_usable(env):
    r = env.post("/models", user="bob", json={"name": "bobs-model", "path": f"runs/job-{env.bob_run}/final"})
    assert r.status_code == 201, r.text
    model_id = r.json()["id"]
    _refused(
        env, env.post("/jobs", json={"name": "x", "config": valid_config(model={"path": "bobs-model"})}), "model.path"
    )
    _refused(
        env,
        env.post(
            "/evaluations",
            json={
                "model": "bobs-model",
                "benchmarks": [{"name": "custom", "data": "users/alice/bench.jsonl", "scorer": "exact"}],
            },
        ),
        "model",
    )
    assert env.get(f"/models/{model_id}").status_code == 404
    # Shared: alice sees it and uses it by name (its directory, inside bob's run, becomes readable to her jobs).
    assert (
        env.client.patch(f"/api/v1/models/{model_id}", json={"shared": True}, headers=env.h("bob")).status_code == 200
    )
    assert env.get(f"/models/{model_id}").json()["shared"] is True
    r = env.post("/jobs", json={"name": "on bob's", "config": valid_config(model={"path": "bobs-model"})})
    assert r.status_code == 201, r.text
    env.post(f"/jobs/{r.json()['id']}/cancel")
    assert (
        env.client.patch(f"/api/v1/models/{model_id}", json={"shared": False}, headers=env.h("alice")).status_code
        == 403
    )
    assert env.delete(f"/models/{model_id}").status_code == 403
    assert (
        env.client.patch(f"/api/v1/models/{model_id}", json={"shared": False}, headers=env.h("bob")).status_code == 200
    )


def test_sharing_a_dataset_opens_its_files_and_nothing_else(env):
    dataset_id, path = _bob_dataset_file(env, "to-share")
    cfg = valid_config(data={"train_file": path, "max_length": 64})
    _refused(env, env.post("/jobs", json={"name": "x", "config": cfg}), "data.train_file")
    assert env.get(f"/datasets/{dataset_id}").status_code == 404
    assert (
        env.client.patch(f"/api/v1/datasets/{dataset_id}", json={"shared": True}, headers=env.h("alice")).status_code
        == 404
    )
    r = env.client.patch(f"/api/v1/datasets/{dataset_id}", json={"shared": True}, headers=env.h("bob"))
    assert r.status_code == 200 and r.json()["shared"] is True, r.text
    listing = env.get("/datasets", params={"q": "to-share"}).json()
    assert [d["id"] for d in listing["items"]] == [dataset_id]
    version = env.get(f"/datasets/{dataset_id}/versions").json()["items"][0]["id"]
    assert env.get(f"/datasets/{dataset_id}/versions/{version}/rows").status_code == 200
    r = env.post("/jobs", json={"name": "on shared", "config": cfg})
    assert r.status_code == 201, r.text
    env.post(f"/jobs/{r.json()['id']}/cancel")
    # Read and use; never change.
    assert env.delete(f"/datasets/{dataset_id}").status_code == 403
    assert (
        env.post(
            f"/datasets/{dataset_id}/versions/{version}/operations", json={"operation": "dedup", "params": {}}
        ).status_code
        == 403
    )
    assert (
        env.client.patch(f"/api/v1/datasets/{dataset_id}", json={"shared": False}, headers=env.h("alice")).status_code
        == 403
    )
    # Bob's other, unshared dataset files stay closed.
    _refused(
        env,
        env.post(
            "/jobs",
            json={"name": "x", "config": valid_config(data={"train_file": _bob_dataset_file(env, "still-private")[1]})},
        ),
        "data.train_file",
    )


def test_own_areas_and_admin_are_accepted(env):
    with session_scope() as s:
        alice = s.get(User, env.user_ids["alice"])
        own = crud.create_job(s, owner=alice, name="alice's run", config=valid_config()).id
    run = env.data_dir / "runs" / f"job-{own}"
    shutil.copytree(env.data_dir / "demo" / "model", run / "final")
    set_status(own, "succeeded", run_dir=str(run))
    (env.data_dir / "shared").mkdir(exist_ok=True)
    (env.data_dir / "shared" / "common.jsonl").write_text(json.dumps(SFT_ROW) + "\n")
    accepted = [
        ("alice", valid_config(model={"path": f"runs/job-{own}/final"})),
        ("alice", valid_config(data={"train_file": "users/alice/train.jsonl"})),
        ("alice", valid_config(data={"train_file": "shared/common.jsonl"})),
        ("alice", valid_config(data={"train_file": str(env.data_dir / "demo" / "data" / "sft.jsonl")})),
        (
            "root",
            valid_config(
                model={"path": f"runs/job-{env.bob_run}/final"},
                data={"train_file": f"runs/job-{env.bob_run}/secret.jsonl"},
            ),
        ),
    ]
    for user, cfg in accepted:
        r = env.post("/jobs", user=user, json={"name": "ok", "config": cfg})
        assert r.status_code == 201, (user, cfg, r.text)
        env.post(f"/jobs/{r.json()['id']}/cancel", user=user)
    # Another user's own area is not alice's.
    (env.data_dir / "users" / "bob").mkdir(exist_ok=True)
    (env.data_dir / "users" / "bob" / "b.jsonl").write_text(json.dumps(SFT_ROW) + "\n")
    _refused(
        env,
        env.post("/jobs", json={"name": "x", "config": valid_config(data={"train_file": "users/bob/b.jsonl"})}),
        "data.train_file",
    )


def test_the_same_answer_whether_or_not_the_file_exists(env):
    """A refused path says the same for an existing file of bob and a missing one: nothing to probe."""
    existing = f"runs/job-{env.bob_run}/secret.jsonl"
    missing = f"runs/job-{env.bob_run}/nothing-here.jsonl"
    msgs = []
    for path in (existing, missing):
        r = env.post("/jobs", json={"name": "x", "config": valid_config(data={"train_file": path})})
        msgs.append(_refused(env, r, "data.train_file").replace(path, "<path>"))
    assert msgs[0] == msgs[1]


# ---------------------------------------------------------------------------------------------- the worker again


def _swap_for_symlink(path: Path, target: Path) -> None:
    path.unlink()
    os.symlink(target, path)


def _no_queued(kind: str) -> None:
    """Nothing else of `kind` waits in this module's queue (so the worker claims the job under test)."""
    with session_scope() as s:
        from sqlmodel import select

        for job in s.exec(select(Job).where(Job.kind == kind, Job.status == "queued")).all():
            job_service.transition(s, job, JobStatus.cancelled, reason="test: out of the way")


def _job(job_id: int) -> Job:
    with session_scope() as s:
        job = s.get(Job, job_id)
        s.expunge(job)
        return job


def test_a_training_path_swapped_after_submission_is_refused_by_the_worker(env):
    from training_platform.workers.supervisor import run_next_job

    planted = env.data_dir / "users" / "alice" / "swap-train.jsonl"
    planted.write_text(json.dumps(SFT_ROW) + "\n")
    _no_queued("train")
    r = env.post(
        "/jobs",
        json={
            "name": "swap",
            "config": valid_config(data={"train_file": "users/alice/swap-train.jsonl", "max_length": 64}),
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    _swap_for_symlink(planted, env.data_dir / "runs" / f"job-{env.bob_run}" / "secret.jsonl")
    assert run_next_job("train", worker="escape-test:1") == job_id
    job = _job(job_id)
    assert job.status == "failed", job.error
    assert "data.train_file" in job.error and str(env.data_dir) not in job.error
    assert job.preflight["checks"][0]["name"] == "paths"


def test_an_unshared_dataset_is_refused_by_the_worker(env):
    from training_platform.workers.supervisor import run_next_job

    dataset_id, path = _bob_dataset_file(env, "shared-then-not")
    env.client.patch(f"/api/v1/datasets/{dataset_id}", json={"shared": True}, headers=env.h("bob"))
    _no_queued("train")
    r = env.post("/jobs", json={"name": "unshared later", "config": valid_config(data={"train_file": path})})
    assert r.status_code == 201, r.text
    env.client.patch(f"/api/v1/datasets/{dataset_id}", json={"shared": False}, headers=env.h("bob"))
    assert run_next_job("train", worker="escape-test:1") == r.json()["id"]
    job = _job(r.json()["id"])
    assert job.status == "failed" and "data.train_file" in job.error, job.error


def test_a_benchmark_file_swapped_after_submission_is_refused_by_the_eval_worker(env):
    from training_platform.workers.eval_tasks import EvalJobSupervisor
    from training_platform.workers.supervisor import run_next_job

    planted = env.data_dir / "users" / "alice" / "swap-bench.jsonl"
    planted.write_text(json.dumps(CUSTOM_ROW) + "\n")
    _no_queued("eval")
    r = env.post(
        "/evaluations",
        json={
            "model": "demo/model",
            "benchmarks": [{"name": "custom", "data": "users/alice/swap-bench.jsonl", "scorer": "exact"}],
        },
    )
    assert r.status_code == 201, r.text
    _swap_for_symlink(planted, env.data_dir / "evals" / f"job-{env.bob_eval}" / "samples" / "gsm8k.jsonl")
    assert run_next_job("eval", worker="escape-test:1", supervisor_class=EvalJobSupervisor) == r.json()["id"]
    job = _job(r.json()["id"])
    assert job.status == "failed", job.error
    assert "benchmarks.0.data" in job.error and str(env.data_dir) not in job.error
    with session_scope() as s:
        assert s.get(Evaluation, job.id) is not None  # the evaluation row stays, failed, with no results


def test_an_eval_set_swapped_after_submission_is_refused_by_the_data_worker(env):
    from training_platform.workers.data_tasks import DataJobSupervisor
    from training_platform.workers.supervisor import run_next_job

    planted = env.data_dir / "users" / "alice" / "swap-evalset.jsonl"
    planted.write_text(json.dumps(SFT_ROW) + "\n")
    r = env.post(
        "/datasets",
        files={"file": ("a.jsonl", json.dumps(SFT_ROW).encode() + b"\n", "application/octet-stream")},
        data={"name": "decon-src"},
    )
    body = ingested(env, r)
    dataset, version = body["dataset"]["id"], body["version"]["id"]
    _no_queued("data")
    r = env.post(
        f"/datasets/{dataset}/versions/{version}/operations",
        json={"operation": "decontaminate", "params": {"eval_sets": ["users/alice/swap-evalset.jsonl"]}},
    )
    assert r.status_code == 202, r.text
    _swap_for_symlink(planted, Path("/etc/hostname"))
    assert run_next_job("data", worker="escape-test:1", supervisor_class=DataJobSupervisor) == r.json()["id"]
    job = _job(r.json()["id"])
    assert job.status == "failed", job.error
    assert "params.eval_sets[0]" in job.error and str(env.data_dir) not in job.error
