"""Sharing the devices through a real `tp up` (its own: a node of 2 CPU devices, 3 training worker processes, a
reservation after 8 s): two users side by side under a quota, the reason a job waits, fair share with three users,
a big job that small ones cannot starve, and usage that matches the runs' wall time."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from _e2e import get_job, running_tp_up, wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RESERVE_AFTER_S = 8
DONE = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def sharing(tmp_path_factory):
    env = {"TP_NODE_DEVICES": "cpu=2", "TP_WORKER_CONCURRENCY": "3", "TP_SCHED_RESERVE_AFTER_S": str(RESERVE_AFTER_S)}
    env["TP_DEVICE_HOUR_COST"] = "cpu=0.5,cuda=2.5"
    with running_tp_up(tmp_path_factory.mktemp("tp_up_sharing"), **env) as (admin, data_dir):
        users = {}
        for name in ("bob", "carol", "dave"):
            r = admin.post("/users", json={"name": name, "is_admin": False})
            assert r.status_code == 201, r.text
            users[name] = httpx.Client(
                base_url=str(admin.base_url), headers={"Authorization": f"Bearer {r.json()['token']}"}, timeout=30
            )
            users[name].user_id = r.json()["user"]["id"]  # type: ignore[attr-defined]
        yield admin, users
        for client in users.values():
            client.close()


def _config(max_steps: int, num_devices: int = 1) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update({"max_steps": max_steps, "logging_steps": 5, "save_steps": 100_000})
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    config["resources"] = {"device": "cpu", "num_devices": num_devices}
    return config


LONG = 100_000  # steps: runs until cancelled


def submit(client: httpx.Client, name: str, max_steps: int, num_devices: int = 1) -> int:
    r = client.post("/jobs", json={"name": name, "config": _config(max_steps, num_devices)})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def status(client: httpx.Client, job_id: int) -> str:
    return get_job(client, job_id)["status"]


def wait_status(client: httpx.Client, job_id: int, wanted: tuple[str, ...], timeout: float = 240) -> dict:
    return wait(
        lambda: j if (j := get_job(client, job_id))["status"] in wanted else None,
        timeout,
        f"job {job_id} to be {'/'.join(wanted)}",
        interval=0.3,
    )


def cancel(client: httpx.Client, job_id: int) -> dict:
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 200
    return wait_status(client, job_id, DONE)


def event_at(client: httpx.Client, job_id: int, statuses: tuple[str, ...]) -> datetime:
    """When the job (last) entered one of `statuses`."""
    events = client.get(f"/jobs/{job_id}/events").json()
    return datetime.fromisoformat(next(e for e in reversed(events) if e["to_status"] in statuses)["ts"].rstrip("Z"))


def claimed_at(client: httpx.Client, job_id: int) -> datetime:
    return event_at(client, job_id, ("preflight",))


def running_span(client: httpx.Client, job_id: int) -> float:
    return (event_at(client, job_id, DONE) - event_at(client, job_id, ("running",))).total_seconds()


def test_two_users_run_side_by_side_and_a_quota_makes_one_wait_with_its_reason(sharing):
    admin, users = sharing
    bob, carol = users["bob"], users["carol"]
    quota = {"max_devices": 1, "max_running_jobs": None, "device_hours_per_week": None}
    assert admin.put(f"/users/{bob.user_id}/quota", json=quota).status_code == 200
    long_job = submit(bob, "bob long", LONG)
    wait_status(bob, long_job, ("running",))
    second = submit(bob, "bob second", 40)
    carols = submit(carol, "carol short", 150)
    wait_status(carol, carols, ("running",))
    assert status(bob, long_job) == "running", "two jobs of two users side by side on the 2-device node"
    queue = get_job(bob, second)["queue"]
    assert queue["reason"] == "quota: bob runs 1 of 1 devices" and queue["position"] >= 1, queue
    listed = {j["id"]: j for j in bob.get("/jobs", params={"status": "queued"}).json()["items"]}
    assert listed[second]["queue"] == queue
    assert status(bob, second) == "queued"
    cancel(bob, long_job)
    done = wait_status(bob, second, DONE)
    assert done["status"] == "succeeded", done
    assert claimed_at(bob, second) >= event_at(bob, long_job, DONE), "it started once bob's first job ended"
    assert wait_status(carol, carols, DONE)["status"] == "succeeded"
    assert admin.put(f"/users/{bob.user_id}/quota", json={**quota, "max_devices": None}).status_code == 200


def test_usage_matches_the_runs_wall_time(sharing):
    admin, users = sharing
    carol = users["carol"]
    (job,) = [j for j in carol.get("/jobs").json()["items"] if j["name"] == "carol short"]
    usage = get_job(carol, job["id"])["usage"]
    span = running_span(carol, job["id"])
    assert usage["devices"] == 1 and usage["device"] == "cpu" and usage["attempts"] == 1
    assert abs(usage["device_seconds"] - span) < 3, (usage, span)
    assert usage["cpu_seconds"] > 1 and usage["peak_memory_bytes"] > 100 * 2**20, usage
    assert usage["cost"] == pytest.approx(usage["device_hours"] * 0.5, rel=1e-3)
    mine = carol.get("/usage", params={"group_by": "user"}).json()
    assert [r["user"] for r in mine["rows"]] == ["carol"], "a user sees their own usage only"
    everyone = {r["user"]: r for r in admin.get("/usage", params={"group_by": "user"}).json()["rows"]}
    assert {"bob", "carol"} <= set(everyone)
    assert everyone["carol"]["device_hours"] == pytest.approx(usage["device_hours"], abs=1e-4)
    by_job = {r["job_id"]: r for r in admin.get("/usage", params={"group_by": "job"}).json()["rows"]}
    assert by_job[job["id"]]["device_hours"] == pytest.approx(usage["device_hours"], abs=1e-4)
    assert admin.get("/usage", params={"group_by": "team"}).status_code == 422
    metrics = admin.get("/metrics").text
    line = next(ln for ln in metrics.splitlines() if ln.startswith('tp_device_seconds_total{device="cpu"}'))
    assert float(line.split()[-1]) >= usage["device_seconds"] - 1


def test_fair_share_runs_the_user_who_used_least_first(sharing):
    admin, users = sharing
    blockers = [submit(admin, f"blocker {i}", LONG) for i in range(2)]
    for job_id in blockers:
        wait_status(admin, job_id, ("running",))
    # bob and carol used some device time (the tests above), dave none: least use first, whatever the age
    used = {r["user"]: r["device_seconds"] for r in admin.get("/usage", params={"group_by": "user"}).json()["rows"]}
    expected = sorted(("bob", "carol", "dave"), key=lambda name: used.get(name, 0.0))
    assert expected[0] == "dave" and used["bob"] != used["carol"], used
    ids = {name: submit(users[name], f"{name} fair", 30) for name in reversed(expected)}  # the heaviest oldest
    positions = {name: get_job(users[name], job_id)["queue"]["position"] for name, job_id in ids.items()}
    assert sorted(positions, key=positions.get) == expected, (positions, used)
    assert get_job(users["dave"], ids["dave"])["queue"]["reason"] == "waiting for 1 cpu device: 0 free"
    for job_id in blockers:
        cancel(admin, job_id)
    finished = {name: wait_status(users[name], job_id, DONE) for name, job_id in ids.items()}
    assert all(j["status"] == "succeeded" for j in finished.values()), finished
    claims = {name: claimed_at(users[name], job_id) for name, job_id in ids.items()}
    first, second, last = expected
    assert claims[first] <= claims[second] < claims[last], claims
    assert claims[last] >= min(event_at(users[n], ids[n], DONE) for n in (first, second))


def test_a_big_job_is_not_starved_by_small_ones(sharing):
    admin, users = sharing
    bob, carol = users["bob"], users["carol"]
    holder = submit(admin, "holder", LONG)
    wait_status(admin, holder, ("running",))
    big = submit(bob, "bob big", 5, num_devices=2)
    assert get_job(bob, big)["queue"]["reason"] == "waiting for 2 cpu devices: 1 free"
    # before the reservation time a small job may use the free device (backfill) ...
    first_small = submit(carol, "carol small 1", 20)
    assert wait_status(carol, first_small, ("running", *DONE))["status"] in ("running", "succeeded")
    wait_status(carol, first_small, DONE)

    def held():
        reason = get_job(bob, big)["queue"]["reason"]
        return reason if "held for it" in reason else None

    wait(held, RESERVE_AFTER_S + 30, "the big job's devices to be held")
    # ... after it, the free device is held for the big job: a new small one waits
    second_small = submit(carol, "carol small 2", 10)
    reason = get_job(carol, second_small)["queue"]["reason"]
    assert reason == f"waiting for 1 cpu device: the free ones are held for job {big} (it waited longest)", reason
    assert status(carol, second_small) == "queued"
    cancel(admin, holder)
    assert wait_status(bob, big, DONE, timeout=300)["status"] == "succeeded"
    assert wait_status(carol, second_small, DONE)["status"] == "succeeded"
    assert event_at(admin, holder, DONE) <= claimed_at(bob, big) < claimed_at(carol, second_small)
    usage = get_job(bob, big)["usage"]
    assert usage["devices"] == 2 and abs(usage["device_seconds"] - 2 * running_span(bob, big)) < 5, usage


def test_a_user_with_a_spent_week_gets_403_naming_the_quota(sharing):
    admin, users = sharing
    dave = users["dave"]
    quota = {"max_devices": None, "max_running_jobs": None, "device_hours_per_week": 0.0001}
    assert admin.put(f"/users/{dave.user_id}/quota", json=quota).status_code == 200
    r = dave.post("/jobs", json={"name": "over budget", "config": _config(10)})
    assert r.status_code == 403, r.text
    assert "device_hours_per_week" in r.json()["detail"] and "frees up at" in r.json()["detail"]
    view = dave.get(f"/users/{dave.user_id}/quota").json()
    assert view["used"]["device_hours_week"] > 0.0001 and view["week_frees_up_at"]
