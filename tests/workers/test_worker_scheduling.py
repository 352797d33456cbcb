"""Who gets which job: priority order, two workers, racing claimers (SQLite)."""

from __future__ import annotations

import pytest
from _wk import assert_claims_race_free, sft_config

pytestmark = pytest.mark.integration


def tiny(**training) -> dict:
    return sft_config(2, eval_steps=100, **training)


def test_priority_order_when_the_worker_starts(platform):
    ids = {p: platform.submit(tiny(), name=f"p{p}", priority=p) for p in (0, 5, 1)}  # no worker running yet
    worker = platform.start_worker("w1")
    try:
        jobs = {p: platform.wait_status(job_id, {"succeeded", "failed"}, timeout=180) for p, job_id in ids.items()}
    finally:
        worker.stop()
    assert all(j.status == "succeeded" for j in jobs.values()), {p: j.error for p, j in jobs.items()}
    by_start = sorted(jobs, key=lambda p: jobs[p].started_at)
    assert by_start == [5, 1, 0]
    claimed_at = {p: next(e[3] for e in platform.events(ids[p]) if e[1] == "preflight") for p in ids}
    assert sorted(claimed_at, key=claimed_at.get) == [5, 1, 0]


def test_two_workers_never_claim_the_same_job(platform):
    workers = [platform.start_worker("w2"), platform.start_worker("w3")]
    try:
        ids = [platform.submit(tiny(), name=f"pair{i}") for i in range(4)]
        jobs = [platform.wait_status(job_id, {"succeeded", "failed"}, timeout=180) for job_id in ids]
    finally:
        for w in workers:
            w.stop()
    assert all(j.status == "succeeded" and j.attempts == 1 for j in jobs), [(j.status, j.error) for j in jobs]
    for job in jobs:
        claims = [e for e in platform.events(job.id) if e[1] == "preflight"]
        assert len(claims) == 1 and claims[0][2].startswith(f"claimed by {job.worker} ")
    hosts = {j.worker.split("@")[0] for j in jobs}
    assert hosts == {"w2", "w3"}, f"one worker did all the work: {[j.worker for j in jobs]}"


def test_racing_claimers_claim_each_job_once(platform):
    assert_claims_race_free(platform)
