"""The runs table's backend on a real database (SQLite and PostgreSQL): job tags and note (POST, PATCH, bounds,
owners), `GET /jobs?tag=` with the other filters, each job's summary (last loss and reward from its metric points,
best evaluation from its checkpoints) in a bounded number of queries per page, saved views (CRUD, the per-user
limit, privacy), and migration 0009 (up, down; test_sharing_api.py checks the models match the head)."""

from __future__ import annotations

import json
import uuid

import pytest
from alembic.script import ScriptDirectory
from api_helpers import database, set_status, update_job, valid_config
from sqlalchemy import event, inspect, text

from training_platform.db import crud
from training_platform.db.migrate import alembic_config, upgrade
from training_platform.db.models import EvalMetric, Evaluation, SavedView, User
from training_platform.db.session import get_engine, make_engine, session_scope
from training_platform.services.saved_views import MAX_VIEWS_PER_USER
from training_platform.services.scheduler import LOAD_STATEMENTS

pytestmark = pytest.mark.integration


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def submitted(api, user: str = "alice", **body) -> dict:
    r = api.post("/jobs", user=user, json={"name": body.pop("name", "tagged"), "config": valid_config(), **body})
    assert r.status_code == 201, r.text
    return r.json()


def problems(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {item["loc"]: item["msg"] for item in response.json()["detail"]}


def listed(api, user: str = "alice", **params) -> list[dict]:
    r = api.get("/jobs", user=user, params={"limit": 200, **params})
    assert r.status_code == 200, r.text
    return r.json()["items"]


# ---------------------------------------------------------------------------------------------- tags and note


def test_a_job_is_created_with_tags_and_a_note(api):
    tag = f"t-{_uid()}"
    job = submitted(api, tags=[tag, "lr:3e-4", tag, "v1.2_a-b"], note="first try\nwith é")
    assert job["tags"] == [tag, "lr:3e-4", "v1.2_a-b"]  # the duplicate dropped, the first order kept
    assert job["note"] == "first try\nwith é"
    assert job["summary"] == {"last_loss": None, "best_eval": None, "last_reward": None, "last_step": None}
    detail = api.get(f"/jobs/{job['id']}").json()
    assert detail["tags"] == job["tags"] and detail["note"] == job["note"] and detail["summary"] == job["summary"]
    (item,) = listed(api, tag=tag)
    assert item["id"] == job["id"] and item["tags"] == job["tags"] and item["note"] == job["note"]
    plain = submitted(api)  # without them: no tags, an empty note
    assert plain["tags"] == [] and plain["note"] == ""
    # /jobs/validate takes the same body as POST /jobs
    out = api.post("/jobs/validate", json={"config": valid_config(), "tags": ["a"], "note": "n"})
    assert out.status_code == 200 and out.json()["valid"], out.text
    assert problems(api.post("/jobs/validate", json={"config": valid_config(), "tags": ["-a"]})).keys() == {"tags[0]"}


def test_patch_changes_only_the_fields_sent(api):
    job = submitted(api, tags=["a"], note="n")
    r = api.patch(f"/jobs/{job['id']}", json={"note": "better"})
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == ["a"] and r.json()["note"] == "better"
    r = api.patch(f"/jobs/{job['id']}", json={"tags": ["baseline", "b", "baseline"]})
    assert r.json()["tags"] == ["baseline", "b"] and r.json()["note"] == "better"
    r = api.patch(f"/jobs/{job['id']}", json={})
    assert r.status_code == 200 and r.json()["tags"] == ["baseline", "b"] and r.json()["note"] == "better"
    r = api.patch(f"/jobs/{job['id']}", json={"tags": [], "note": ""})
    assert r.json()["tags"] == [] and r.json()["note"] == ""
    got = api.get(f"/jobs/{job['id']}").json()
    assert got["tags"] == [] and got["note"] == "" and got["updated_at"] == job["updated_at"]  # not a state change
    # a finished job too: labels never change how a job runs
    set_status(job["id"], "succeeded")
    assert api.patch(f"/jobs/{job['id']}", json={"tags": ["done"]}).json()["tags"] == ["done"]


def test_tag_and_note_bounds_are_422_naming_the_field(api):
    job = submitted(api, tags=["keep"], note="keep")
    url = f"/jobs/{job['id']}"
    assert problems(api.patch(url, json={"tags": [f"t{i}" for i in range(17)]})) == {"tags": "at most 16 tags, got 17"}
    assert api.patch(url, json={"tags": [f"t{i}" for i in range(16)]}).status_code == 200
    bad = problems(api.patch(url, json={"tags": ["ok", "-starts-with-dash", "has space", "x" * 33, "", "a\n", 7]}))
    assert set(bad) == {"tags[1]", "tags[2]", "tags[3]", "tags[4]", "tags[5]", "tags[6]"}, bad
    assert "may only contain letters, digits, '.', '_', ':', '-'" in bad["tags[1]"]
    assert "1 to 32 characters" in bad["tags[3]"] and "1 to 32 characters" in bad["tags[4]"]
    assert bad["tags[6]"].startswith("must be a string")
    assert problems(api.patch(url, json={"tags": "baseline"})) == {"tags": "must be a list, got 'baseline'"}
    assert problems(api.patch(url, json={"note": "x" * 4001})) == {"note": "must be at most 4000 characters"}
    assert api.patch(url, json={"note": "x" * 4000}).status_code == 200
    assert problems(api.patch(url, json={"color": "red"})) == {"color": "unknown field"}
    assert problems(api.patch(url, json={"tagz": ["a"]}))["tagz"] == "unknown field (did you mean 'tags'?)"
    # POST /jobs applies the same rules
    assert set(problems(api.post("/jobs", json={"name": "b", "config": valid_config(), "tags": ["a b"]}))) == {
        "tags[0]"
    }
    assert set(problems(api.post("/jobs", json={"name": "b", "config": valid_config(), "note": "x" * 4001}))) == {
        "note"
    }
    got = api.get(url).json()
    assert got["tags"] == [f"t{i}" for i in range(16)] and got["note"] == "x" * 4000  # nothing refused was stored


def test_only_the_owner_or_an_admin_can_patch(api):
    job = submitted(api, tags=["mine"], note="alice's")
    r = api.patch(f"/jobs/{job['id']}", user="bob", json={"note": "bob was here"})
    assert r.status_code == 404 and r.json() == {"detail": f"job {job['id']} not found"}
    assert api.get(f"/jobs/{job['id']}/events", user="bob").status_code == 404  # the same 404 as other owned routes
    assert api.patch("/jobs/999999", json={"note": "x"}).status_code == 404
    r = api.patch(f"/jobs/{job['id']}", user="root", json={"note": "reviewed by root"})
    assert r.status_code == 200 and r.json()["note"] == "reviewed by root" and r.json()["owner"] == "alice"
    assert api.get(f"/jobs/{job['id']}").json()["note"] == "reviewed by root"


def test_tag_filter_combines_with_status_owner_and_algorithm(api):
    base = f"x{_uid()}"
    ids = {}
    for name, owner, tags in [
        ("queued", "alice", [base, "other"]),
        ("done", "alice", [base]),
        ("untagged", "alice", ["other"]),
        ("upper", "alice", [base.upper()]),  # tags are case-sensitive
        ("underscore", "alice", [f"{base}_1"]),  # a LIKE's `_` would match `base-1` and `base21`
        ("bobs", "bob", [base]),
    ]:
        ids[name] = submitted(api, user=owner, name=f"{base}-{name}", tags=tags)["id"]
    set_status(ids["done"], "succeeded")

    assert {j["id"] for j in listed(api, tag=base)} == {ids["queued"], ids["done"]}  # alice sees only hers
    assert {j["id"] for j in listed(api, user="root", tag=base)} == {ids["queued"], ids["done"], ids["bobs"]}
    assert {j["id"] for j in listed(api, tag=base, status="succeeded")} == {ids["done"]}
    assert {j["id"] for j in listed(api, tag=base, status=["queued", "succeeded"])} == {ids["queued"], ids["done"]}
    assert {j["id"] for j in listed(api, user="root", tag=base, owner="bob")} == {ids["bobs"]}
    assert {j["id"] for j in listed(api, tag=base, algorithm="sft", status="queued")} == {ids["queued"]}
    assert listed(api, tag=base, algorithm="dpo") == []
    assert {j["id"] for j in listed(api, tag=base.upper())} == {ids["upper"]}
    assert {j["id"] for j in listed(api, tag=f"{base}_1")} == {ids["underscore"]}
    assert listed(api, tag=f"{base}-1") == [] and listed(api, tag=f"{base}21") == []
    assert listed(api, tag=base[:-1]) == []  # whole tags only
    page = api.get("/jobs", params={"tag": base, "limit": 1}).json()
    assert page["total"] == 2 and len(page["items"]) == 1
    assert {j["id"] for j in listed(api, tag="other", q=base)} == {ids["queued"], ids["untagged"]}
    bad = problems(api.get("/jobs", params={"tag": "has space"}))
    assert set(bad) == {"query.tag"} and "may only contain" in bad["query.tag"]
    assert set(problems(api.get("/jobs", params={"tag": "x" * 33}))) == {"query.tag"}


# ---------------------------------------------------------------------------------------------- summaries


def _evaluation(api, source_job_id: int, step: int, metrics: dict[str, float], status: str = "succeeded") -> int:
    """An eval job of `source_job_id`'s checkpoint at `step` with its summary metrics, as the eval worker stores it."""
    with session_scope() as s:
        owner = s.get(User, api.user_ids["alice"])
        job = crud.create_job(s, owner=owner, name=f"eval step {step}", config={}, kind="eval")
        eval_id = job.id
        s.add(
            Evaluation(
                job_id=eval_id,
                owner_id=owner.id,
                model_label=f"job {source_job_id} step {step}",
                model_path=f"/runs/{source_job_id}/step_{step}",
                source_job_id=source_job_id,
                checkpoint_step=step,
                benchmarks=sorted({key.split("/")[0] for key in metrics}),
            )
        )
        s.flush()
        for key, value in metrics.items():
            benchmark, metric = key.split("/")
            s.add(EvalMetric(job_id=eval_id, benchmark=benchmark, metric=metric, value=value, n=10))
    set_status(eval_id, status)
    return eval_id


def _trained(api, name: str, points: list[tuple[int, str, float]], checkpoints: tuple[int, ...] = ()) -> int:
    job_id = submitted(api, name=name)["id"]
    set_status(job_id, "running")
    with session_scope() as s:
        if points:
            crud.add_metric_points(s, job_id, points)
        for step in checkpoints:
            crud.upsert_checkpoint(
                s,
                job_id,
                step=step,
                path=f"/runs/job-{job_id}/checkpoints/step_{step:06d}",
                sha256="0" * 64,
                size_bytes=1,
            )
    return job_id


def _count_statements():
    """A context manager counting the SQL statements the API's engine runs meanwhile."""
    from contextlib import contextmanager

    @contextmanager
    def counting():
        seen: list[str] = []

        def before(conn, cursor, statement, parameters, context, executemany):
            seen.append(statement)

        engine = get_engine()
        event.listen(engine, "before_cursor_execute", before)
        try:
            yield seen
        finally:
            event.remove(engine, "before_cursor_execute", before)

    return counting()


def test_summaries_of_metric_points_and_checkpoint_evaluations(api):
    base = f"s{_uid()}"
    # SFT: loss at steps 1..30 (the last one counts, not the lowest), an eval_loss row, two evaluated checkpoints
    sft = _trained(
        api,
        f"{base}-sft",
        [(s, "loss", 2.0 / s) for s in range(1, 31)] + [(30, "eval_loss", 9.0), (30, "lr", 1e-4)],
        checkpoints=(10, 20, 30),
    )
    _evaluation(api, sft, 10, {"gsm8k/accuracy": 0.3, "math/accuracy": 0.9})
    _evaluation(api, sft, 20, {"gsm8k/accuracy": 0.5, "gsm8k/accuracy_strict": 0.4})
    _evaluation(api, sft, 30, {"gsm8k/accuracy": 0.5})  # a tie: the earliest step wins
    _evaluation(api, sft, 30, {"gsm8k/accuracy": 0.99}, status="failed")  # not a result
    # GRPO: loss and reward (reward logged one step later)
    grpo = _trained(api, f"{base}-grpo", [(s, "loss", 0.1 * s) for s in (1, 2)] + [(3, "reward", 0.75)])
    # PPO: no `reward`, its `objective/rlhf_reward`
    ppo = _trained(api, f"{base}-ppo", [(4, "loss", 1.5), (4, "objective/rlhf_reward", -0.25)])
    # keep_best_by recorded a best checkpoint: that is the best evaluation
    kept = _trained(api, f"{base}-kept", [(5, "loss", 0.5)], checkpoints=(5,))
    _evaluation(api, kept, 5, {"gsm8k/accuracy": 0.8})
    update_job(kept, best_checkpoint={"metric": "math/accuracy", "step": 5, "value": 0.25, "evaluation_id": 1})
    fresh = submitted(api, name=f"{base}-fresh")["id"]

    expected = {
        sft: {
            "last_loss": pytest.approx(2.0 / 30),
            "best_eval": {"metric": "gsm8k/accuracy", "value": 0.5, "step": 20},
            "last_reward": None,
            "last_step": 30,
        },
        grpo: {"last_loss": pytest.approx(0.2), "best_eval": None, "last_reward": 0.75, "last_step": 3},
        ppo: {"last_loss": 1.5, "best_eval": None, "last_reward": -0.25, "last_step": 4},
        kept: {
            "last_loss": 0.5,
            "best_eval": {"metric": "math/accuracy", "value": 0.25, "step": 5},
            "last_reward": None,
            "last_step": 5,
        },
        fresh: {"last_loss": None, "best_eval": None, "last_reward": None, "last_step": None},
    }
    items = {j["id"]: j for j in listed(api, q=base)}
    assert set(items) == set(expected)
    for job_id, summary in expected.items():
        assert items[job_id]["summary"] == summary, job_id
        detail = api.get(f"/jobs/{job_id}").json()
        detail.pop("distributed"), detail.pop("usage")  # the detail's own: its processes and its usage
        assert detail == items[job_id], job_id  # the list and the detail agree, field for field

    # A bounded number of statements per page, whatever its size: the token, the page, the metric points of all its
    # jobs, the evaluations of those without a best checkpoint and their metrics (none when nothing was evaluated);
    # a page with a queued training job (`fresh`, the newest, on both) adds the scheduler's fixed read of the queue.
    with _count_statements() as one:
        assert len(api.get("/jobs", params={"q": base, "limit": 1}).json()["items"]) == 1
    with _count_statements() as five:
        assert len(api.get("/jobs", params={"q": base, "limit": 5}).json()["items"]) == 5
    assert len(one) <= len(five) <= 5 + LOAD_STATEMENTS, five
    assert sum("metric_points" in statement for statement in five) == 1, five


# ---------------------------------------------------------------------------------------------- saved views


def _new_user(api, name: str) -> str:
    with session_scope() as s:
        user, token = crud.create_user(s, name)
        api.tokens[name], api.user_ids[name] = token, user.id
    return name


def test_saved_views_crud_replace_and_privacy(api):
    alice = _new_user(api, f"va{_uid()}")
    r = api.post("/views", user=alice, json={"name": "running grpo", "page": "jobs", "query": {"status": "running"}})
    assert r.status_code == 201, r.text
    first = r.json()
    assert set(first) == {"id", "name", "page", "query", "created_at"} and first["query"] == {"status": "running"}
    second = api.post(
        "/views", user=alice, json={"name": "baselines", "page": "jobs", "query": {"tag": "baseline", "q": ""}}
    ).json()
    views = api.get("/views", user=alice, params={"page": "jobs"}).json()
    assert [v["id"] for v in views] == [second["id"], first["id"]]  # newest first
    assert [v["id"] for v in api.get("/views", user=alice).json()] == [second["id"], first["id"]]

    # the same name on the same page replaces its query (200, same id)
    r = api.post(
        "/views", user=alice, json={"name": "running grpo", "page": "jobs", "query": {"status": "running", "a": "b"}}
    )
    assert r.status_code == 200, r.text
    assert r.json()["id"] == first["id"] and r.json()["query"] == {"status": "running", "a": "b"}
    assert len(api.get("/views", user=alice).json()) == 2

    # private: another user and an admin neither list nor delete them
    bob = _new_user(api, f"vb{_uid()}")
    assert api.get("/views", user=bob).json() == []
    assert api.get("/views", user="root").json() == []  # admins see only their own views too
    r = api.delete(f"/views/{first['id']}", user=bob)
    assert r.status_code == 404 and r.json() == {"detail": f"view {first['id']} not found"}
    assert api.delete(f"/views/{first['id']}", user="root").status_code == 404
    # bob may use the same name: views are per user
    assert api.post("/views", user=bob, json={"name": "running grpo", "page": "jobs", "query": {}}).status_code == 201

    assert api.delete(f"/views/{first['id']}", user=alice).status_code == 204
    assert api.delete(f"/views/{first['id']}", user=alice).status_code == 404
    assert [v["id"] for v in api.get("/views", user=alice).json()] == [second["id"]]


def test_saved_view_bounds(api):
    user = _new_user(api, f"vc{_uid()}")

    def post(**body):
        return api.post("/views", user=user, json={"name": "v", "page": "jobs", "query": {}, **body})

    assert set(problems(post(page="runs"))) == {"page"}
    assert set(problems(post(name=""))) == {"name"}
    assert problems(post(name="n" * 65)) == {"name": "must be at most 64 characters"}
    assert post(name="n" * 64).status_code == 201
    assert problems(post(query={f"k{i}": "v" for i in range(21)})) == {"query": "at most 20 keys, got 21"}
    assert post(name="twenty", query={f"k{i}": "v" for i in range(20)}).status_code == 201
    assert problems(post(query={"q": "x" * 201})) == {"query.q": "must be at most 200 characters"}
    assert set(problems(post(query={"q": 3}))) == {"query.q"}
    assert set(problems(post(query={"q": ["a"]}))) == {"query.q"}
    assert set(problems(post(query=["a"]))) == {"query"}
    assert set(problems(post(zzz="x"))) == {"zzz"}
    assert set(problems(api.post("/views", user=user, json={"page": "jobs"}))) == {"name"}
    assert set(problems(api.get("/views", user=user, params={"page": "runs"}))) == {"query.page"}


def test_saved_views_are_limited_per_user(api):
    user = _new_user(api, f"vd{_uid()}")
    with session_scope() as s:  # 49 stored directly, the 50th over the API
        for i in range(MAX_VIEWS_PER_USER - 1):
            s.add(SavedView(owner_id=api.user_ids[user], name=f"v{i}", page="jobs", query={"i": str(i)}))
    assert api.post("/views", user=user, json={"name": "last", "page": "jobs", "query": {}}).status_code == 201
    r = api.post("/views", user=user, json={"name": "one too many", "page": "jobs", "query": {}})
    assert r.status_code == 409 and r.json() == {"detail": "at most 50 saved views per user: delete one first"}
    # replacing one is not adding one
    r = api.post("/views", user=user, json={"name": "v3", "page": "jobs", "query": {"status": "failed"}})
    assert r.status_code == 200 and r.json()["query"] == {"status": "failed"}
    views = api.get("/views", user=user).json()
    assert len(views) == MAX_VIEWS_PER_USER
    assert api.delete(f"/views/{views[0]['id']}", user=user).status_code == 204
    assert api.post("/views", user=user, json={"name": "one too many", "page": "jobs", "query": {}}).status_code == 201
    other = _new_user(api, f"ve{_uid()}")  # the limit is per user
    assert api.post("/views", user=other, json={"name": "mine", "page": "jobs", "query": {}}).status_code == 201


# ---------------------------------------------------------------------------------------------- migration 0009


def test_0009_follows_0008():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_revision("0009").down_revision == "0008"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0009_up_down_and_the_models_match_the_migrations(kind, tmp_path):
    from alembic import command

    with database(kind, tmp_path) as url:
        upgrade(url, "0008")
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
                        "config, cancel_requested, created_at, updated_at) VALUES (:u, 'old', 'train', 'sft', "
                        "'succeeded', 0, 0, 0, '{}', false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            upgrade(url, "0009")
            with engine.connect() as conn:
                ((name, tags, note),) = conn.execute(text("SELECT name, tags, note FROM jobs")).all()
                assert (name, tags if isinstance(tags, list) else json.loads(tags), note) == ("old", [], "")
                assert {c["name"] for c in inspect(conn).get_columns("saved_views")} == set(SavedView.model_fields)
                if kind == "sqlite":
                    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
                    assert "AUTOINCREMENT" in ddl
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO saved_views (owner_id, name, page, query, created_at) "
                        "VALUES (:u, 'v', 'jobs', '{}', CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            with pytest.raises(Exception, match="(?i)unique"), engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO saved_views (owner_id, name, page, query, created_at) "
                        "VALUES (:u, 'v', 'jobs', '{}', CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            engine.dispose()
            command.downgrade(alembic_config(url), "0008")
            with engine.connect() as conn:
                insp = inspect(conn)
                assert "saved_views" not in insp.get_table_names()
                assert not {"tags", "note"} & {c["name"] for c in insp.get_columns("jobs")}
                assert conn.execute(text("SELECT name FROM jobs")).all() == [("old",)]
                if kind == "sqlite":
                    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
                    assert "AUTOINCREMENT" in ddl
            engine.dispose()
            upgrade(url, "head")
        finally:
            engine.dispose()
