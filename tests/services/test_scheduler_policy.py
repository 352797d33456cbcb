"""The scheduler's policy (services/scheduler.plan), a pure function: admission by free devices, backfill, quotas,
fair share, the reservation of a job that waited too long, and the reasons it gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from training_platform.services.quotas import Quota
from training_platform.services.scheduler import Ask, Holding, Snapshot, ask_of, plan

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
NODE = "node:gpu1"


def ask(job_id, owner=1, devices=1, device="cpu", priority=0, waited_s=10.0, ray=False, name=None) -> Ask:
    return Ask(
        job_id=job_id,
        owner_id=owner,
        owner=name or f"user{owner}",
        priority=priority,
        queued_at=NOW - timedelta(seconds=waited_s),
        ray=ray,
        device=device,
        devices=devices,
    )


def snap(queued, holding=(), pools=None, quotas=None, week=None) -> Snapshot:
    return Snapshot(
        queued=list(queued),
        holding=list(holding),
        pools=pools if pools is not None else {NODE: {"cpu": 2}},
        quotas=quotas or {},
        week_seconds=week or {},
    )


def decide(s: Snapshot, reserve_after_s: float = 600, pools=None) -> dict[int, object]:
    return {d.job_id: d for d in plan(s, now=NOW, reserve_after_s=reserve_after_s, pools=pools)}


def test_small_jobs_run_side_by_side_and_a_big_one_waits_with_its_reason():
    d = decide(snap([ask(1), ask(2), ask(3)]))
    assert d[1].start == (NODE, "cpu") and d[2].start == (NODE, "cpu")
    assert d[3].start is None and d[3].reason == "waiting for 1 cpu device: 0 free"
    d = decide(snap([ask(4, devices=2, waited_s=50), ask(5, waited_s=10)], holding=[Holding(9, 2, NODE, "cpu", 1)]))
    assert d[4].start is None and d[4].reason == "waiting for 2 cpu devices: 1 free"
    assert d[5].start == (NODE, "cpu"), "a 1-device job does not wait behind a 2-device one (backfill)"
    assert [d[4].position, d[5].position] == [1, 2]


def test_a_job_waiting_past_the_reservation_time_has_the_free_devices_held():
    queued = [ask(4, devices=2, waited_s=700), ask(5, waited_s=10)]
    d = decide(snap(queued, holding=[Holding(9, 2, NODE, "cpu", 1)]))
    assert d[4].holds == (NODE, "cpu") and "held for it" in d[4].reason
    assert (
        d[5].start is None
        and d[5].reason == "waiting for 1 cpu device: the free ones are held for job 4 (it waited longest)"
    )
    # when the running job ends the big one starts, not the small one
    d = decide(snap(queued))
    assert d[4].start == (NODE, "cpu") and d[5].start is None
    # the held job goes first even before a lighter user's fresh job
    heavy = [ask(4, owner=1, devices=2, waited_s=700), ask(5, owner=2, waited_s=10)]
    d = decide(snap(heavy, holding=[Holding(9, 3, NODE, "cpu", 1)], week={1: 50_000.0, 2: 0.0}))
    assert d[4].position == 1 and d[4].holds == (NODE, "cpu") and d[5].start is None
    # another device type in the same pool is not held
    d = decide(
        snap(
            [*queued, ask(6, device="cuda")],
            holding=[Holding(9, 2, NODE, "cpu", 1)],
            pools={NODE: {"cpu": 2, "cuda": 1}},
        )
    )
    assert d[6].start == (NODE, "cuda")


def test_order_is_priority_then_least_use_then_age():
    week = {1: 9000.0, 2: 100.0, 3: 0.0}
    queued = [ask(1, owner=1, waited_s=300), ask(2, owner=2, waited_s=200), ask(3, owner=3, waited_s=100)]
    d = decide(snap(queued, pools={NODE: {"cpu": 1}}, week=week))
    assert [d[j].position for j in (3, 2, 1)] == [1, 2, 3]
    assert d[3].start is not None and d[2].start is None and d[1].start is None
    d = decide(snap([*queued, ask(4, owner=1, priority=5, waited_s=1)], pools={NODE: {"cpu": 1}}, week=week))
    assert d[4].position == 1 and d[4].start is not None
    same_use = decide(snap([ask(7, owner=3, waited_s=5), ask(8, owner=3, waited_s=50)], pools={NODE: {"cpu": 1}}))
    assert same_use[8].position == 1, "then the longest waiting"


def test_quotas_make_jobs_wait_with_the_quota_named():
    quotas = {2: Quota(max_devices=1), 3: Quota(max_running_jobs=1), 4: Quota(device_hours_per_week=1.0)}
    held = [Holding(9, 2, NODE, "cpu", 1), Holding(10, 3, NODE, "cpu", 1)]
    queued = [ask(1, owner=2, name="bob"), ask(2, owner=3, name="carol"), ask(3, owner=4, name="dan")]
    d = decide(snap(queued, holding=held, pools={NODE: {"cpu": 8}}, quotas=quotas, week={4: 3600.0}))
    assert d[1].reason == "quota: bob runs 1 of 1 devices"
    assert d[2].reason == "quota: carol runs 1 of 1 jobs"
    assert d[3].reason == "quota: dan used 1.00 of 1 device-hours this week"
    assert all(d[j].start is None for j in (1, 2, 3))
    d = decide(snap([ask(5, owner=2, devices=2, name="bob")], pools={NODE: {"cpu": 8}}, quotas=quotas))
    assert d[5].reason == "quota: the job asks 2 devices, bob may use at most 1"
    # a job admitted in this pass counts against its owner's limit for the next one
    d = decide(
        snap([ask(6, owner=2, name="bob"), ask(7, owner=2, name="bob")], pools={NODE: {"cpu": 8}}, quotas=quotas)
    )
    assert d[6].start is not None and d[7].reason == "quota: bob runs 1 of 1 devices"


def test_pools_devices_and_the_ray_cluster():
    pools = {NODE: {"cuda": 2, "cpu": 4}, "node:gpu2": {"cuda": 4}, "ray": {"cpu": 6, "cuda": 0}}
    d = decide(snap([ask(1, device="auto", devices=3)], pools=pools))
    assert d[1].start == ("node:gpu2", "cuda"), "auto means cuda where the node has it"
    d = decide(snap([ask(2, device="cuda", devices=8)], pools=pools))
    assert d[2].reason == "waiting for 8 cuda devices: no node has more than 4"
    d = decide(snap([ask(3, device="cpu", devices=4, ray=True)], pools=pools))
    assert d[3].start == ("ray", "cpu")
    d = decide(snap([ask(4, device="cpu", devices=8, ray=True)], pools=pools))
    assert d[4].reason == "waiting for 8 cpu devices: the Ray cluster has 6"
    d = decide(snap([ask(5)], pools={}))
    assert d[5].reason == "waiting for a training worker's node: none has reported its devices yet"
    # a claimer only considers its own node and the cluster
    d = decide(snap([ask(6, device="cuda", devices=3)], pools=pools), pools=[NODE, "ray"])
    assert d[6].start is None and d[6].reason == "waiting for 3 cuda devices: no node has more than 2"


def test_ask_of_reads_the_config():
    a = ask_of(1, 2, "bob", 0, NOW, {"resources": {"num_nodes": 2, "num_devices": 4, "device": "cuda"}})
    assert (a.ray, a.device, a.devices) == (True, "cuda", 8)
    a = ask_of(1, 2, "bob", 0, NOW, {"resources": {"num_devices": 2}})
    assert (a.ray, a.device, a.devices) == (False, "auto", 2)
    assert ask_of(1, 2, "bob", 0, NOW, {}).devices == 1
