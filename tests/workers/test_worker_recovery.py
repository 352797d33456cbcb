"""A worker dies mid-job (kill -9 of the Celery main process): beat's recovery sweep requeues the job and another
worker resumes it from the checkpoint the orphaned training process wrote on its way out."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from _wk import assert_metric_history, checkpoint_sha_from_disk, sft_config, wait_for

pytestmark = pytest.mark.integration

MAX_STEPS = 40


@pytest.mark.parametrize("ranks", [1, 2])
def test_kill_9_of_the_worker_resumes_the_job_from_its_checkpoint(platform, ranks):
    """With 2 ranks the training process is the `tp train` driver of a torchrun group: it stops both ranks (a
    checkpoint) when its worker dies, and the resumed job continues on 2 ranks with no step lost or repeated."""
    fast_recovery = {"TP_HEARTBEAT_TIMEOUT": "5", "TP_RECOVERY_INTERVAL": "1"}
    try:
        _kill_and_resume(platform, ranks, fast_recovery)
    finally:
        platform.stop_all()  # this run's beat and workers: the next parameter starts its own


def _kill_and_resume(platform, ranks: int, fast_recovery: dict[str, str]) -> None:
    platform.start_beat(env=fast_recovery)
    worker_a = platform.start_worker(f"wa{ranks}")
    config = sft_config(MAX_STEPS, eval_steps=1000)
    if ranks > 1:
        config["resources"] = {"num_devices": ranks, "device": "cpu"}
        config["training"]["per_device_batch_size"] //= ranks
    job_id = platform.submit(config, name=f"survivor-{ranks}")

    run_dir = platform.data_dir / "runs" / f"job-{job_id}"
    # Kill as soon as the first checkpoint is on disk (watching the file system, not the DB: no ingest delay).
    wait_for(lambda: (run_dir / "checkpoints" / "latest").exists(), 120, interval=0.05, what="a checkpoint")
    trainer_pid = json.loads((run_dir / "run.json").read_text())["pid"]
    assert platform.job(job_id).status == "running"
    pool = psutil.Process(worker_a.pid).children()
    assert psutil.Process(trainer_pid).ppid() in {p.pid for p in pool}

    t_kill = time.time()
    os.kill(worker_a.pid, signal.SIGKILL)
    # The pool process dies with its parent (Celery's PDEATHSIG), the training process gets SIGTERM (ours) and
    # stops cleanly after writing a checkpoint.
    wait_for(
        lambda: not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == "zombie",
        60,
        what="the orphaned training process to stop",
    )
    console = (platform.data_dir / "runs" / f"job-{job_id}.console.log").read_text()
    assert "(SIGTERM); continue with" in console, console[-2000:]
    stopped_at = json.loads((run_dir / "run.json").read_text())["step"]

    assert stopped_at < MAX_STEPS
    platform.start_worker(f"wb{ranks}")
    job = platform.wait_status(job_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert job.status == "succeeded", job.error
    assert job.attempts == 2 and job.current_step == MAX_STEPS

    events = platform.events(job_id)
    assert [(e[0], e[1]) for e in events] == [
        (None, "queued"),
        ("queued", "preflight"),
        ("preflight", "running"),
        ("running", "queued"),
        ("queued", "preflight"),
        ("preflight", "running"),
        ("running", "succeeded"),
    ]
    assert events[3][2].startswith("worker lost: heartbeat stale since")
    assert f"wb{ranks}@" in events[4][2]
    assert events[5][2].startswith(f"resuming from checkpoint step {stopped_at} (attempt 2;")
    requeued_after = events[3][3].timestamp() - t_kill
    resumed_after = events[5][3].timestamp() - t_kill
    print(
        f"\n[recovery] kill -9 -> requeued {requeued_after:.1f}s, -> running again (resumed from step "
        f"{stopped_at}) {resumed_after:.1f}s"
    )

    assert f"--resume {run_dir}" in (platform.data_dir / "runs" / f"job-{job_id}.console.log").read_text()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "succeeded" and info["resumed_from"] == f"step_{stopped_at:06d}"
    assert_metric_history(platform, job_id, run_dir, MAX_STEPS)
    live = [c for c in platform.checkpoints(job_id) if not c.removed]
    assert live[-1].step == MAX_STEPS
    for c in live:
        assert (c.sha256, c.size_bytes) == checkpoint_sha_from_disk(Path(c.path))
