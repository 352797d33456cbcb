"""The recovery sweep on its own (no worker running): stale heartbeats, lost wake-ups, the attempts cap."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from _wk import sft_config

from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job
from training_platform.db.session import session_scope
from training_platform.taskqueue.wake import waiting_messages
from training_platform.workers import supervisor

pytestmark = pytest.mark.integration


def _set(job_id: int, **fields) -> None:
    with session_scope() as s:
        job = s.get(Job, job_id)
        for key, value in fields.items():
            setattr(job, key, value)
        s.add(job)


def _purge() -> None:
    from training_platform.taskqueue.app import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("train")


def test_stale_jobs_are_requeued_and_fresh_ones_left_alone(platform):
    stale = platform.submit(sft_config(5), name="stale", priority=3, wake=False)
    fresh = platform.submit(sft_config(5), name="fresh", wake=False)
    long_ago, now = utcnow() - timedelta(minutes=10), utcnow()
    _set(stale, status="running", worker="ghost@host:1", heartbeat_at=long_ago, attempts=1, current_step=7)
    _set(fresh, status="running", worker="alive@host:2", heartbeat_at=now, attempts=1)
    _purge()

    result = supervisor.recover_stale_jobs()
    assert result["requeued"] == [stale] and result["failed"] == []
    assert result["woken"] == {"train": 1} and waiting_messages("train") == 1
    job = platform.job(stale)
    assert job.status == "queued" and job.worker is None and job.heartbeat_at is None
    reason = platform.events(stale)[-1][2]
    assert reason.startswith("worker lost: heartbeat stale since ") and "ghost@host:1" in reason and "step 7" in reason
    assert platform.job(fresh).status == "running"
    _set(fresh, status="cancelled")
    _set(stale, status="cancelled")
    _purge()


def test_a_lost_wake_up_is_sent_again_once(platform):
    job_id = platform.submit(sft_config(5), name="forgotten", wake=False)  # as if the message was lost
    _purge()
    assert supervisor.recover_stale_jobs()["woken"] == {}  # too young to be called lost
    _set(job_id, updated_at=utcnow() - timedelta(seconds=supervisor.LOST_MESSAGE_AFTER_S + 5))
    assert supervisor.recover_stale_jobs()["woken"] == {"train": 1}
    assert waiting_messages("train") == 1
    assert supervisor.recover_stale_jobs()["woken"] == {}  # a wake-up is waiting: nothing more to send
    _set(job_id, status="cancelled")
    _purge()


def test_a_job_that_keeps_losing_its_worker_fails(platform):
    job_id = platform.submit(sft_config(5), name="cursed", wake=False)
    _set(
        job_id,
        status="preflight",
        worker="ghost@host:3",
        heartbeat_at=utcnow() - timedelta(minutes=5),
        attempts=supervisor.MAX_ATTEMPTS,
    )
    result = supervisor.recover_stale_jobs()
    assert result["failed"] == [job_id] and result["requeued"] == []
    job = platform.job(job_id)
    assert job.status == "failed" and job.error.startswith(f"gave up after {supervisor.MAX_ATTEMPTS} attempts")
    _purge()


def test_a_new_attempt_waits_for_the_previous_training_process_to_leave_the_run_dir(platform):
    """The run-directory flock: held by the worker and inherited by its training process, so a resumed attempt
    cannot start while the previous attempt's process (orphaned by a dead worker) is still writing."""
    job_id = platform.submit(sft_config(5), name="locked", wake=False)
    sup = supervisor.JobSupervisor(job_id, "me@host:1")
    sup.runs.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, sys, time\n"
                "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(2)"
            ),
            str(sup.lock_file),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        t0 = time.monotonic()
        sup._acquire_run_lock()
        waited = time.monotonic() - t0
        assert holder.wait(timeout=10) == 0
        assert 1.0 < waited < 10
    finally:
        holder.kill()
        holder.wait()
        if sup._lock_fd is not None:
            os.close(sup._lock_fd)
    _set(job_id, status="cancelled")
