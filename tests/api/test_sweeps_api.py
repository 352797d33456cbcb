"""Sweeps end to end on a real database (SQLite and PostgreSQL): one job per grid point and seed, validated like
POST /jobs before anything is stored, summarised from real metric rows."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from api_helpers import set_status, valid_config
from sqlalchemy import func
from sqlmodel import select

from training_platform.db import crud
from training_platform.db.models import Job, JobEvent, Sweep
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

LR = "training.learning_rate"
BS = "training.per_device_batch_size"


def counts() -> dict[str, int]:
    with session_scope() as s:
        return {m.__name__: s.exec(select(func.count()).select_from(m)).one() for m in (Sweep, Job, JobEvent)}


def create(api, user="alice", **body):
    body.setdefault("name", "sw")
    body.setdefault("config", valid_config())
    return api.post("/sweeps", user=user, json=body)


def created(api, user="alice", **body) -> dict:
    r = create(api, user, **body)
    assert r.status_code == 201, r.text
    return r.json()


def problems(r) -> dict[str, str]:
    assert r.status_code == 422, r.text
    return {item["loc"]: item["msg"] for item in r.json()["detail"]}


# ---------------------------------------------------------------------------------------------- create


def test_grid_2x2_and_2_seeds_creates_8_grouped_jobs(api):
    before = counts()
    sweep = created(api, name="grid", grid={LR: [1e-4, 3e-4], BS: [2, 4]}, seeds=[0, 1], priority=3)
    after = counts()
    assert after["Sweep"] == before["Sweep"] + 1 and after["Job"] == before["Job"] + 8
    assert after["JobEvent"] == before["JobEvent"] + 8  # one "submitted" event each
    assert sweep["grid"] == {LR: [1e-4, 3e-4], BS: [2, 4]} and sweep["seeds"] == [0, 1]
    assert sweep["jobs_total"] == 8 and sweep["status_counts"] == {"queued": 8}
    assert sweep["warning"] is None and sweep["config"]["training"]["max_steps"] == 5

    expected = [(lr, bs, seed) for (lr, bs), seed in itertools.product(itertools.product([1e-4, 3e-4], [2, 4]), [0, 1])]
    names = [j["name"] for j in sweep["jobs"]]
    assert names[:2] == ["grid lr=0.0001 bs=2 seed=0", "grid lr=0.0001 bs=2 seed=1"]
    got = []
    for item in sweep["jobs"]:
        job = api.get(f"/jobs/{item['id']}").json()  # the stored job, through GET /jobs
        assert job["sweep_id"] == sweep["id"] and job["status"] == "queued" and job["priority"] == 3
        t = job["config"]["training"]
        got.append((t["learning_rate"], t["per_device_batch_size"], t["seed"]))
        assert item["point"] == {LR: t["learning_rate"], BS: t["per_device_batch_size"]}
        assert item["seed"] == t["seed"] and item["metrics"] == {}
        base = valid_config()  # everything but the swept fields is the base config's
        assert job["config"]["model"] == base["model"] and job["config"]["data"] == base["data"]
        assert t["max_steps"] == 5
    assert got == expected
    assert [p["label"] for p in sweep["points"]] == [
        "lr=0.0001 bs=2",
        "lr=0.0001 bs=4",
        "lr=0.0003 bs=2",
        "lr=0.0003 bs=4",
    ]
    assert all(len(p["job_ids"]) == 2 and p["metrics"] == {} for p in sweep["points"])
    # the jobs listing knows the group too
    listed = api.get("/jobs", params={"q": "grid lr=", "limit": 200}).json()["items"]
    assert {j["sweep_id"] for j in listed if j["id"] in {i["id"] for i in sweep["jobs"]}} == {sweep["id"]}


def test_without_seeds_or_grid_one_job_with_the_config_seed(api):
    config = valid_config(training={"max_steps": 5, "per_device_batch_size": 4, "seed": 7})
    sweep = created(api, name="single", config=config)
    assert sweep["seeds"] == [7] and [j["name"] for j in sweep["jobs"]] == ["single seed=7"]
    assert sweep["points"][0]["point"] == {} and sweep["points"][0]["label"] == ""


def test_a_bad_grid_value_anywhere_is_a_422_naming_it_and_nothing_is_created(api):
    before = counts()
    found = problems(create(api, grid={LR: [1e-4, 2.0], BS: [2, 4, 0]}, seeds=[0, 1]))
    assert set(found) == {f"grid.{LR}[1]", f"grid.{BS}[2]"}, found
    assert "<= 1" in found[f"grid.{LR}[1]"] and ">= 1" in found[f"grid.{BS}[2]"]
    # a typo in a key, a path outside the allowed areas, an unknown algorithm: each named
    found = problems(
        create(
            api,
            grid={
                "training.lerning_rate": [1e-4],
                "model.path": ["demo/model", "/etc"],
                "algorithm.name": ["sft", "nope"],
            },
        )
    )
    assert found["grid.training.lerning_rate[0]"].startswith("unknown field (did you mean 'learning_rate'"), found
    assert set(found) == {"grid.training.lerning_rate[0]", "grid.model.path[1]", "grid.algorithm.name[1]"}, found
    # the base config: named as POST /jobs names it
    bad = valid_config(training={"max_steps": 0, "per_device_batch_size": 4})
    found = problems(create(api, config=bad, grid={LR: [1e-4]}))
    assert list(found) == ["training.max_steps"], found
    assert counts() == before


@pytest.mark.parametrize(
    ("body", "loc", "reason"),
    [
        ({"grid": {"training.seed": [1, 2]}}, "grid.training.seed", "set by `seeds`"),
        ({"grid": {LR: [1e-4, 1e-4]}}, f"grid.{LR}[1]", "duplicate of value [0]"),
        ({"grid": {"training.max_grad_norm": [1, 2, 1.0]}}, "grid.training.max_grad_norm[2]", "duplicate of value [0]"),
        ({"seeds": [1, 2, 1]}, "seeds[2]", "duplicate of seeds[0]"),
        ({"grid": {"training": [{"max_steps": 3}], LR: [1e-4]}}, f"grid.{LR}", "overlaps the grid key 'training'"),
        ({"grid": {"training..x": [1]}}, "grid.training..x", "dotted config path"),
        ({"grid": {LR: [1e-4] * 16, BS: [1, 2, 3, 4, 5]}}, "grid", "at most 64 per sweep"),
        ({"grid": {LR: list(range(17))}}, f"grid.{LR}", "at most 16"),
        ({"grid": {f"training.k{i}": [1] for i in range(9)}}, "grid", "at most 8"),
        ({"seeds": list(range(11))}, "seeds", "at most 10"),
        ({"seeds": [-1]}, "seeds[0]", ">= 0"),
        ({"seeds": []}, "seeds", "at least 1"),
        ({"grid": {LR: []}}, f"grid.{LR}", "at least 1"),
        ({"name": "x" * 121}, "name", "at most 120"),
        ({"grid": {LR: ["x" * 5000]}}, f"grid.{LR}[0]", "at most 4096 bytes"),
        ({"config": {**valid_config(), "pad": "x" * 70_000}}, "config", "at most 64 KiB"),
    ],
)
def test_bounds_and_shape_are_422s(api, body, loc, reason):
    before = counts()
    found = problems(create(api, **body))
    assert loc in found and reason in found[loc], found
    assert counts() == before


def test_a_failure_while_creating_leaves_nothing(api, monkeypatch):
    """Creation is one transaction: the sweep row and every job, or none of them."""
    real, calls = crud.create_job, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(crud, "create_job", flaky)
    before = counts()
    try:
        r = create(api, grid={LR: [1e-4, 3e-4]}, seeds=[0, 1])
        assert r.status_code == 500
    except RuntimeError:  # the TestClient re-raises the server's exception
        pass
    assert len(calls) == 3 and counts() == before


# ---------------------------------------------------------------------------------------------- summary


def test_summary_mean_and_std_across_seeds_from_metric_rows(api):
    sweep = created(api, name="stats", grid={LR: [1e-4, 3e-4]}, seeds=[0, 1, 2])
    jobs = {(j["point"][LR], j["seed"]): j["id"] for j in sweep["jobs"]}
    finals = {(1e-4, 0): 0.5, (1e-4, 1): 0.7, (1e-4, 2): 0.9, (3e-4, 0): 0.3, (3e-4, 1): 0.1}
    with session_scope() as s:
        for (lr, seed), final in finals.items():
            job_id = jobs[(lr, seed)]
            # steps out of order; the final value is the one at the highest step
            crud.add_metric_points(s, job_id, [(10, "loss", final), (3, "loss", 5.0), (1, "loss", 9.0)])
            crud.add_metric_points(s, job_id, [(2, "loss", 7.0)])
            if lr == 1e-4 and seed < 2:
                crud.add_metric_points(s, job_id, [(10, "acc", 0.25 * (seed + 1))])
        crud.add_metric_points(s, jobs[(1e-4, 2)], [(10, "grad_norm", math.inf)])
    for key, job_id in jobs.items():
        if key in ((3e-4, 1), (3e-4, 2)):
            continue
        set_status(job_id, "succeeded")
    set_status(jobs[(3e-4, 1)], "running")  # not finished: its value is shown, not averaged
    set_status(jobs[(3e-4, 2)], "failed")

    detail = api.get(f"/sweeps/{sweep['id']}").json()
    assert detail["status_counts"] == {"succeeded": 4, "running": 1, "failed": 1}
    by_id = {j["id"]: j for j in detail["jobs"]}
    for key, final in finals.items():
        assert by_id[jobs[key]]["metrics"]["loss"] == pytest.approx(final)
    assert by_id[jobs[(3e-4, 2)]]["metrics"] == {}
    assert by_id[jobs[(1e-4, 2)]]["metrics"]["grad_norm"] is None  # not finite: null, never a 500

    a, b = detail["points"]
    assert (
        a["label"] == "lr=0.0001"
        and a["succeeded"] == 3
        and sorted(a["job_ids"]) == sorted(jobs[(1e-4, s)] for s in range(3))
    )
    assert a["metrics"]["loss"]["mean"] == pytest.approx(0.7)
    assert a["metrics"]["loss"]["std"] == pytest.approx(statistics.stdev([0.5, 0.7, 0.9]))
    assert a["metrics"]["loss"]["n"] == 3
    assert a["metrics"]["acc"] == {
        "mean": pytest.approx(0.375),
        "std": pytest.approx(statistics.stdev([0.25, 0.5])),
        "n": 2,
    }
    assert "grad_norm" not in a["metrics"]  # no finite value
    assert b["label"] == "lr=0.0003" and b["succeeded"] == 1
    assert b["metrics"] == {"loss": {"mean": pytest.approx(0.3), "std": None, "n": 1}}


# ---------------------------------------------------------------------------------------------- access, cancel


def test_visibility_listing_and_404s(api):
    sweep = created(api, name="private-sweep-x", grid={LR: [1e-4]})
    sid = sweep["id"]
    assert api.get(f"/sweeps/{sid}", user="bob").status_code == 404
    assert api.post(f"/sweeps/{sid}/cancel", user="bob").status_code == 404
    assert api.get(f"/sweeps/{sid}", user="root").json()["owner"] == "alice"
    assert api.get("/sweeps/2147483647").status_code == 404
    assert api.get("/sweeps/2147483648").status_code == 422
    mine = api.get("/sweeps", params={"q": "PRIVATE-sweep"}).json()
    assert [s["id"] for s in mine["items"]] == [sid] and mine["total"] == 1
    assert mine["items"][0]["status_counts"] == {"queued": 1} and mine["items"][0]["jobs_total"] == 1
    assert api.get("/sweeps", user="bob", params={"q": "private-sweep"}).json()["total"] == 0
    assert sid in [s["id"] for s in api.get("/sweeps", user="root", params={"limit": 200}).json()["items"]]
    page = api.get("/sweeps", params={"limit": 1, "offset": 0}).json()
    assert len(page["items"]) == 1 and page["total"] >= 1


def test_cancel_stops_the_unfinished_jobs_only(api):
    sweep = created(api, name="cancel", grid={LR: [1e-4]}, seeds=[0, 1, 2, 3])
    ids = [j["id"] for j in sweep["jobs"]]
    set_status(ids[0], "succeeded")
    set_status(ids[1], "running")
    set_status(ids[2], "failed")
    r = api.post(f"/sweeps/{sweep['id']}/cancel")
    assert r.status_code == 200, r.text
    status = {j["id"]: j["status"] for j in r.json()["jobs"]}
    assert status == {ids[0]: "succeeded", ids[1]: "running", ids[2]: "failed", ids[3]: "cancelled"}
    assert api.get(f"/jobs/{ids[1]}").json()["cancel_requested"] is True  # the worker stops it
    assert api.post(f"/sweeps/{sweep['id']}/cancel", user="root").status_code == 200  # nothing left: fine


def test_the_largest_sweep_64_jobs(api):
    lrs = [i * 1e-5 for i in range(1, 9)]
    sweep = created(api, name="big", grid={LR: lrs, BS: list(range(1, 9))})
    assert sweep["jobs_total"] == 64 and len(sweep["points"]) == 64
    assert len({j["name"] for j in sweep["jobs"]}) == 64
    assert problems(create(api, name="big", grid={LR: lrs, BS: list(range(1, 9))}, seeds=[1, 2]))["grid"] == (
        "64 grid points x 2 seeds = 128 jobs; at most 64 per sweep"
    )


def test_broker_down_the_sweep_is_stored_and_warns_once(data_dir, redis_client, tmp_path, caplog):
    """The jobs are the queue of record: with the broker down every job is still created, and the request tries
    the broker once (not once per job, each with its timeout)."""
    from api_helpers import database, running_api

    with database("sqlite", tmp_path) as url, running_api(data_dir, url, REDIS_URL="redis://127.0.0.1:1/15") as down:
        caplog.clear()
        sweep = created(down, name="no broker", grid={LR: [1e-4, 3e-4]}, seeds=[0, 1, 2])
        assert sum("no worker was woken" in rec.getMessage() for rec in caplog.records) == 1  # one attempt
        assert sweep["jobs_total"] == 6 and sweep["status_counts"] == {"queued": 6}
        assert "broker unreachable" in sweep["warning"]
