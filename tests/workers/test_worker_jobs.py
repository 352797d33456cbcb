"""Training jobs through a real Celery worker on SQLite: success with live metrics, the preflight gate, cancel."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _wk import run_sft_happy_path, sft_config, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(platform):
    proc = platform.start_worker("w1")
    yield proc
    proc.stop()


def test_sft_job_succeeds_with_live_metrics_and_checkpoints(platform, worker):
    timings = run_sft_happy_path(platform, max_steps=30)
    print(
        f"\n[sqlite] created->running {timings['created_to_running_s']:.2f}s, "
        f"submit->done {timings['submit_to_done_s']:.1f}s"
    )
    # A worker is woken, not polled: the job starts well within the preflight's few seconds.
    assert timings["created_to_running_s"] < 30


def test_preflight_gate_fails_a_job_with_a_missing_dataset(platform, worker):
    cfg = sft_config(10)
    cfg["data"]["train_file"] = "demo/data/does_not_exist.jsonl"
    job_id = platform.submit(cfg, name="bad-data")
    job = platform.wait_status(job_id, {"failed", "succeeded", "cancelled"}, timeout=60)

    assert job.status == "failed"
    assert job.error.startswith("preflight failed: data.train_file: no such file")
    report = job.preflight
    assert report["ok"] is False
    assert any(e["loc"] == "data.train_file" and "does_not_exist.jsonl" in e["msg"] for e in report["errors"])
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["config"]["ok"] is False and checks["tokenizer"]["ok"] is True and checks["disk"]["ok"] is True
    # Nothing trained: never running, no run directory, no metrics.
    assert [e[1] for e in platform.events(job_id)] == ["queued", "preflight", "failed"]
    assert job.started_at is None
    assert not (platform.data_dir / "runs" / f"job-{job_id}").exists()
    assert platform.metrics(job_id) == []


def test_cancel_a_running_job_stops_it_with_a_checkpoint(platform, worker):
    job_id = platform.submit(sft_config(2000, eval_steps=1000, save_steps=1000), name="to-cancel")
    wait_for(lambda: len(platform.metrics(job_id, "loss")) >= 3, 90, what="3 logged steps")
    t_cancel = time.monotonic()
    platform.set_cancel(job_id)
    job = platform.wait_status(job_id, {"cancelled", "failed", "succeeded"}, timeout=90)
    print(f"\n[sqlite] cancel -> cancelled {time.monotonic() - t_cancel:.1f}s at step {job.current_step}")

    assert job.status == "cancelled", job.error
    assert job.error is None
    assert platform.events(job_id)[-1][1:3] == (
        "cancelled",
        f"cancelled by user (stopped at step {job.current_step} with a checkpoint)",
    )
    assert 3 <= job.current_step < 2000
    run_dir = Path(job.run_dir)
    assert (run_dir / "STOP").exists()
    checkpoints = platform.checkpoints(job_id)
    assert [c.step for c in checkpoints] == [job.current_step]  # the stop checkpoint, registered
    assert (Path(checkpoints[0].path) / "model.safetensors").is_file()
    loss_steps = [step for _, step, _ in platform.metrics(job_id, "loss")]
    assert loss_steps == list(range(1, job.current_step + 1))


def test_a_two_rank_job_runs_and_is_cancelled_through_the_worker(platform, worker):
    """num_devices 2 on CPU: the worker's `tp train` starts two ranks under torchrun; metrics arrive once per step,
    the checkpoints are registered, and a cancel stops both ranks (no rank process left behind)."""
    import psutil

    done = platform.submit(
        sft_config(6, eval_steps=None, per_device_batch_size=4)
        | {"resources": {"num_devices": 2, "device": "cpu"}, "data": {**sft_config()["data"], "eval_file": None}},
        name="two-ranks",
    )
    job = platform.wait_status(done, {"succeeded", "failed", "cancelled"}, timeout=240)
    assert job.status == "succeeded", job.error
    assert [step for _, step, _ in platform.metrics(done, "loss")] == list(range(1, 7))
    assert [c.step for c in platform.checkpoints(done)] == [6]
    run_info = json.loads((Path(job.run_dir) / "run.json").read_text())
    assert (run_info["launcher"], run_info["world_size"]) == ("torchrun", 2)

    job_id = platform.submit(
        sft_config(5000, eval_steps=None, save_steps=5000, per_device_batch_size=4)
        | {"resources": {"num_devices": 2, "device": "cpu"}, "data": {**sft_config()["data"], "eval_file": None}},
        name="two-ranks-cancel",
    )
    wait_for(lambda: len(platform.metrics(job_id, "loss")) >= 3, 180, what="3 logged steps")
    ranks = [
        p
        for p in psutil.process_iter(["cmdline"])  # the ranks, not torchrun's agent (same arguments)
        if "training_platform.training.rank_main" in (p.info["cmdline"] or [])
        and "torch.distributed.run" not in p.info["cmdline"]
        and str(platform.data_dir / "runs" / f"job-{job_id}") in p.info["cmdline"]  # this platform's job
    ]
    assert len(ranks) == 2
    t_cancel = time.monotonic()
    platform.set_cancel(job_id)
    job = platform.wait_status(job_id, {"cancelled", "failed", "succeeded"}, timeout=120)
    assert job.status == "cancelled", job.error
    assert time.monotonic() - t_cancel < 60
    assert [c.step for c in platform.checkpoints(job_id)] == [job.current_step]
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
