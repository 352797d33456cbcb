"""Schedule firing (services/schedules.py, run by beat's tick and the training worker) against a real database
(SQLite) and the workers' broker: cron due times, every N-th checkpoint, no double firing under concurrent ticks,
firings that cannot run are recorded, disabled schedules stay quiet."""

from __future__ import annotations

import shutil
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.models import Checkpoint, EvalSchedule, Evaluation, Job
from training_platform.db.session import session_scope
from training_platform.services import schedules as scheduler

pytestmark = pytest.mark.integration

REQUEST = {
    "benchmarks": [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 3}],
    "generation": {"max_new_tokens": 4},
}


@pytest.fixture(scope="module", autouse=True)
def demo_is_an_allowed_root(platform, demo_assets):
    """The worker fixture links demo/ to a directory outside TP_DATA_DIR: allow it like TP_MODEL_ROOTS would."""
    from training_platform.core.settings import get_settings

    mp = pytest.MonkeyPatch()
    mp.setenv("TP_MODEL_ROOTS", str(demo_assets.resolve()))
    get_settings.cache_clear()
    yield
    mp.undo()
    get_settings.cache_clear()


def _training_job(platform, name: str) -> tuple[int, Path]:
    owner = platform.user()
    with session_scope() as s:
        job = crud.create_job(s, owner=owner, name=name, config={"algorithm": {"name": "sft"}})
        run_dir = platform.data_dir / "runs" / f"job-{job.id}"
        job.run_dir = str(run_dir)
        s.add(job)
        job_id = job.id
    (run_dir / "checkpoints").mkdir(parents=True)
    return job_id, run_dir


def _add_checkpoint(platform, job_id: int, run_dir: Path, step: int, removed: bool = False) -> None:
    path = run_dir / "checkpoints" / f"step_{step:06d}"
    if not removed:
        shutil.copytree(platform.data_dir / "demo" / "model", path)
    with session_scope() as s:
        s.add(Checkpoint(job_id=job_id, step=step, path=str(path), sha256="0" * 64, size_bytes=1, removed=removed))


def _schedule(platform, **fields) -> int:
    owner = platform.user()
    with session_scope() as s:
        schedule = EvalSchedule(owner_id=owner.id, name=fields.pop("name", "s"), request=REQUEST, **fields)
        s.add(schedule)
        s.flush()
        return schedule.id


def _evaluations(schedule_id: int) -> list[Evaluation]:
    with session_scope() as s:
        rows = s.exec(select(Evaluation).where(Evaluation.schedule_id == schedule_id).order_by(Evaluation.job_id)).all()
        for r in rows:
            s.expunge(r)
        return list(rows)


def _get(schedule_id: int) -> EvalSchedule:
    with session_scope() as s:
        schedule = s.get(EvalSchedule, schedule_id)
        s.expunge(schedule)
        return schedule


def test_a_due_cron_schedule_fires_once_even_with_concurrent_ticks(platform):
    missed_since = utcnow() - timedelta(hours=1)  # 60 missed minutes: one firing, not sixty
    schedule_id = _schedule(platform, trigger="cron", cron="* * * * *", model="demo/model", next_fire_at=missed_since)
    results: list[list[int]] = []
    threads = [threading.Thread(target=lambda: results.append(scheduler.fire_due_cron())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    evaluations = _evaluations(schedule_id)
    assert len(evaluations) == 1 and sorted(j for r in results for j in r) == [evaluations[0].job_id]
    schedule = _get(schedule_id)
    assert schedule.fired_count == 1 and "evaluation" in schedule.last_message
    next_at = schedule.next_fire_at.replace(tzinfo=None) if schedule.next_fire_at.tzinfo else schedule.next_fire_at
    assert next_at > utcnow().replace(tzinfo=None), "the next time is in the future"
    assert scheduler.fire_due_cron() == []  # not due again until then

    with session_scope() as s:
        job = s.get(Job, evaluations[0].job_id)
        assert job.kind == "eval" and job.status == "queued" and job.max_steps == 100
        assert job.config["eval"]["model"]["path"] == str((platform.data_dir / "demo" / "model").resolve())
        data = platform.data_dir / "demo/data/gsm8k_eval.jsonl"
        assert job.config["eval"]["benchmarks"][0]["data"] == str(data.resolve())


def test_every_nth_checkpoint_fires_once_per_checkpoint(platform):
    job_id, run_dir = _training_job(platform, "watched")
    schedule_id = _schedule(
        platform, trigger="on_new_checkpoint", job_id=job_id, every_n=2, keep_best_by="gsm8k/accuracy"
    )
    _add_checkpoint(platform, job_id, run_dir, 10)
    assert scheduler.fire_checkpoint_triggers(job_id) == []  # checkpoint #1
    _add_checkpoint(platform, job_id, run_dir, 20)
    _add_checkpoint(platform, job_id, run_dir, 30)
    _add_checkpoint(platform, job_id, run_dir, 40)
    fired: list[list[int]] = []
    threads = [
        threading.Thread(target=lambda: fired.append(scheduler.fire_checkpoint_triggers(job_id))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    evaluations = _evaluations(schedule_id)
    assert [e.checkpoint_step for e in evaluations] == [20, 40]  # checkpoints #2 and #4, once each
    assert sorted(j for f in fired for j in f) == [e.job_id for e in evaluations]
    assert all(e.source_job_id == job_id and e.keep_best_by == "gsm8k/accuracy" for e in evaluations)
    # The checkpoints being evaluated are pinned against rotation.
    assert sorted(p.name for p in (run_dir / "pins").iterdir()) == [
        f"step_000020.eval-{evaluations[0].job_id}",
        f"step_000040.eval-{evaluations[1].job_id}",
    ]
    assert scheduler.fire_checkpoint_triggers() == []  # the tick finds nothing new
    assert _get(schedule_id).last_checkpoint_step == 40


def test_a_checkpoint_rotated_away_before_firing_is_recorded_not_run(platform):
    job_id, run_dir = _training_job(platform, "fast rotation")
    schedule_id = _schedule(platform, trigger="on_new_checkpoint", job_id=job_id, every_n=1)
    _add_checkpoint(platform, job_id, run_dir, 5, removed=True)
    assert scheduler.fire_checkpoint_triggers(job_id) == []
    schedule = _get(schedule_id)
    assert "not run" in schedule.last_message and "no checkpoint at step 5" in schedule.last_message
    assert schedule.fired_count == 0 and schedule.enabled


def test_a_disabled_schedule_does_not_fire(platform):
    job_id, run_dir = _training_job(platform, "disabled")
    on_ckpt = _schedule(platform, trigger="on_new_checkpoint", job_id=job_id, enabled=False)
    cron = _schedule(
        platform,
        trigger="cron",
        cron="* * * * *",
        model="demo/model",
        enabled=False,
        next_fire_at=utcnow() - timedelta(minutes=5),
    )
    _add_checkpoint(platform, job_id, run_dir, 1)
    scheduler.tick()
    assert _evaluations(on_ckpt) == [] and _evaluations(cron) == []


def test_cron_on_a_job_evaluates_its_latest_checkpoint_once(platform):
    job_id, run_dir = _training_job(platform, "nightly")
    _add_checkpoint(platform, job_id, run_dir, 100)
    schedule_id = _schedule(
        platform, trigger="cron", cron="* * * * *", job_id=job_id, next_fire_at=utcnow() - timedelta(seconds=1)
    )
    assert len(scheduler.fire_due_cron()) == 1
    with session_scope() as s:  # due again, but nothing new to evaluate
        schedule = s.get(EvalSchedule, schedule_id)
        schedule.next_fire_at = utcnow() - timedelta(seconds=1)
        s.add(schedule)
    assert scheduler.fire_due_cron() == []
    assert "already evaluated" in _get(schedule_id).last_message
    _add_checkpoint(platform, job_id, run_dir, 200)
    with session_scope() as s:
        schedule = s.get(EvalSchedule, schedule_id)
        schedule.next_fire_at = utcnow() - timedelta(seconds=1)
        s.add(schedule)
    assert len(scheduler.fire_due_cron()) == 1
    assert [e.checkpoint_step for e in _evaluations(schedule_id)] == [100, 200]
