"""GET /jobs/{id}/rollouts: the rollouts an RL run kept (rollouts.jsonl), filtered by step and total reward, paged,
visible as the job is (owner, admin; another user gets a 404)."""

from __future__ import annotations

import pytest
from api_helpers import make_run_dir, set_status, valid_config

from training_platform.db import crud
from training_platform.db.models import Job, User
from training_platform.db.session import session_scope
from training_platform.training.rollouts import RolloutWriter, rollout_row
from training_platform.training.rundir import RunDir

pytestmark = pytest.mark.integration

RL = {
    "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
    "algorithm": {"name": "grpo", "num_generations": 2},
    "rewards": [{"name": "math_answer"}],
}


def make_job(api, *, owner: str = "alice", rl: bool = True, rows_per_step: int = 0, steps: int = 0) -> int:
    with session_scope() as s:
        user = s.get(User, api.user_ids[owner])
        job_id = crud.create_job(s, owner=user, name=f"rollouts-{owner}", config=valid_config(**(RL if rl else {}))).id
    run_dir = make_run_dir(api.data_dir, job_id, ["step 1"])
    set_status(job_id, "running", run_dir=str(run_dir), worker="w1")
    if rows_per_step:
        writer = RolloutWriter(RunDir(run_dir), samples_per_step=rows_per_step, max_mb=1)
        for step in range(1, steps + 1):
            writer.write_step(
                step * 5,
                [
                    rollout_row(
                        step * 5, f"{i}+{step}=", f"answer {step}.{i}", {"math_answer": float(i % 2)}, i / 10, i - 1.5
                    )
                    for i in range(rows_per_step)
                ],
            )
    return job_id


@pytest.fixture(scope="module")
def jobs(sqlite_api):
    return {
        "rl": make_job(sqlite_api, rows_per_step=4, steps=3),
        "sft": make_job(sqlite_api, rl=False),
        "queued_rl": make_job(sqlite_api),
    }


def page(api, job_id: int, query: str = "", user: str = "alice", status: int = 200) -> dict:
    r = api.get(f"/jobs/{job_id}/rollouts{query}", user=user)
    assert r.status_code == status, r.text
    return r.json()


def test_all_rollouts_in_step_order_with_the_steps_available(sqlite_api, jobs):
    body = page(sqlite_api, jobs["rl"])
    assert body["total"] == 12 and body["limit"] == 50 and body["offset"] == 0
    assert body["steps"] == [5, 10, 15]
    assert [r["step"] for r in body["items"]] == [5] * 4 + [10] * 4 + [15] * 4
    first = body["items"][0]
    assert first == {
        "step": 5,
        "prompt": "0+1=",
        "completion": "answer 1.0",
        "rewards": {"math_answer": 0.0},
        "reward": 0.0,
        "advantage": -1.5,
        "turns": None,
        "tool_calls": None,
        "tool_errors": None,
    }


def test_filters_and_pagination(sqlite_api, jobs):
    api, job = sqlite_api, jobs["rl"]
    body = page(api, job, "?step=10")
    assert body["total"] == 4 and {r["step"] for r in body["items"]} == {10} and body["steps"] == [5, 10, 15]
    body = page(api, job, "?min_reward=0.2")
    assert body["total"] == 6 and all(r["reward"] >= 0.2 for r in body["items"])
    body = page(api, job, "?min_reward=0.1&max_reward=0.2&step=15")
    assert [r["reward"] for r in body["items"]] == [0.1, 0.2]
    pages = [page(api, job, f"?limit=5&offset={o}") for o in (0, 5, 10)]
    assert [len(p["items"]) for p in pages] == [5, 5, 2] and all(p["total"] == 12 for p in pages)
    together = [(r["step"], r["completion"]) for p in pages for r in p["items"]]
    assert together == [(r["step"], r["completion"]) for r in page(api, job)["items"]]
    assert page(api, job, "?offset=100")["items"] == []
    assert page(api, job, "?step=7") == {"items": [], "total": 0, "limit": 50, "offset": 0, "steps": [5, 10, 15]}


def test_bad_queries_name_the_parameter(sqlite_api, jobs):
    for query, loc in (
        ("?limit=0", "query.limit"),
        ("?limit=501", "query.limit"),
        ("?offset=-1", "query.offset"),
        ("?step=-1", "query.step"),
        ("?min_reward=nan", "query.min_reward"),
        ("?max_reward=inf", "query.max_reward"),
        ("?min_reward=2&max_reward=1", "query.min_reward"),
        ("?tool_errors=maybe", "query.tool_errors"),
    ):
        body = page(sqlite_api, jobs["rl"], query, status=422)
        assert any(d["loc"] == loc for d in body["detail"]), (query, body)


def test_non_rl_jobs_and_runs_without_rollouts_answer_an_empty_page(sqlite_api, jobs):
    empty = {"items": [], "total": 0, "limit": 50, "offset": 0, "steps": []}
    assert page(sqlite_api, jobs["sft"]) == empty
    assert page(sqlite_api, jobs["queued_rl"]) == empty


def test_visible_as_the_job_is(sqlite_api, jobs):
    assert page(sqlite_api, jobs["rl"], user="root")["total"] == 12, "admins see every job"
    body = page(sqlite_api, jobs["rl"], user="bob", status=404)
    assert "not found" in body["detail"]
    page(sqlite_api, 999_999, status=404)
    r = sqlite_api.client.get(f"/api/v1/jobs/{jobs['rl']}/rollouts")
    assert r.status_code == 401


def test_a_row_being_written_is_not_served(sqlite_api, jobs):
    job = make_job(sqlite_api, rows_per_step=2, steps=1)
    with session_scope() as s:
        run_dir = s.get(Job, job).run_dir
    with RunDir(run_dir).rollouts_file.open("a") as f:
        f.write('{"step": 10, "prompt": "half a r')
    body = page(sqlite_api, job)
    assert body["total"] == 2 and body["steps"] == [5]


def test_agent_episodes_show_their_turns_and_filter_by_tool_errors(sqlite_api, jobs):
    job = make_job(sqlite_api)
    with session_scope() as s:
        run_dir = s.get(Job, job).run_dir
    call = {"name": "calculator", "arguments": {"expression": "37*48"}}
    good = [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {
            "role": "tool",
            "name": "calculator",
            "arguments": call["arguments"],
            "content": "1776",
            "ok": True,
            "latency_s": 0.001,
            "reward": 0.0,
        },
        {"role": "assistant", "content": "#### 1776"},
    ]
    bad = [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "calculator", "arguments": {"x": 1}}]},
        {
            "role": "tool",
            "name": "calculator",
            "arguments": {"x": 1},
            "content": "error: x",
            "ok": False,
            "latency_s": 0.0,
            "reward": -0.1,
        },
        {"role": "assistant", "content": "#### 5"},
    ]
    rows = [
        rollout_row(1, "37*48=", "...", {}, 1.0, turns=good, tool_calls=1, tool_errors=0),
        rollout_row(1, "2*3=", "...", {}, -0.1, turns=bad, tool_calls=1, tool_errors=1),
        rollout_row(1, "1+1=", "2", {}, 0.0),  # not an agent episode
    ]
    RolloutWriter(RunDir(run_dir), samples_per_step=3, max_mb=1).write_step(1, rows)
    body = page(sqlite_api, job)
    assert body["total"] == 3
    first = body["items"][0]
    assert first["tool_calls"] == 1 and first["tool_errors"] == 0
    assert [t["role"] for t in first["turns"]] == ["assistant", "tool", "assistant"]
    assert first["turns"][0]["tool_calls"] == [call]
    assert first["turns"][1] | {"tool_calls": None} == {
        "role": "tool",
        "content": "1776",
        "name": "calculator",
        "arguments": {"expression": "37*48"},
        "ok": True,
        "latency_s": 0.001,
        "reward": 0.0,
        "tool_calls": None,
    }
    assert body["items"][2]["turns"] is None and body["items"][2]["tool_errors"] is None
    with_errors = page(sqlite_api, job, "?tool_errors=true")
    assert [r["prompt"] for r in with_errors["items"]] == ["2*3="] and with_errors["total"] == 1
    assert with_errors["items"][0]["turns"][1]["ok"] is False
    without = page(sqlite_api, job, "?tool_errors=false")
    assert [r["prompt"] for r in without["items"]] == ["37*48="], "rows with no agent record match neither"
