"""Helpers for the worker tests: real processes, polling, job/metric queries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
REDIS_URL = os.environ.get("TP_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
PG_ADMIN_URL = os.environ.get("TP_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
CELERY = [sys.executable, "-m", "celery", "-A", "training_platform.taskqueue.app"]


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.2, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def sft_config(max_steps: int = 30, **training: Any) -> dict:
    from training_platform.training.config import load_yaml

    cfg = load_yaml(str(EXAMPLES / "sft_tiny.yaml"))
    cfg["training"].update(max_steps=max_steps, logging_steps=1, save_steps=10, eval_steps=max(max_steps // 2, 1))
    cfg["training"].update(training)
    return cfg


class Proc:
    """A real process in its own process group (stopping it stops its pool and training processes too)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_file: Path):
        self.log_file = log_file
        self._log = log_file.open("ab")
        self.popen = subprocess.Popen(
            argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )
        self.pid = self.popen.pid

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> Proc:
        wait_for(lambda: " ready." in self.log() or self.popen.poll() is not None, timeout, what=f"{self.log_file}")
        assert self.popen.poll() is None, f"process exited early:\n{self.log()[-3000:]}"
        return self

    def stop(self, timeout: float = 30) -> None:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(self.pid):
                self.popen.poll()
                time.sleep(0.2)
            if not _group_alive(self.pid):
                break
        self.popen.poll()
        self._log.close()


def _group_alive(pgid: int) -> bool:
    import psutil

    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


@dataclass
class Platform:
    data_dir: Path
    database_url: str
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)

    # -- processes
    def start_worker(
        self, name: str = "w1", env: dict[str, str] | None = None, ready: bool = True, queues: str = "train"
    ) -> Proc:
        argv = [
            *CELERY,
            "worker",
            "-Q",
            queues,
            "-c",
            "1",
            "--pool",
            "prefork",
            "-Ofair",
            "-n",
            f"{name}@%h",
            "--loglevel",
            "INFO",
        ]
        proc = Proc(argv, {**self.env, **(env or {})}, self.data_dir / f"{name}.log")
        self.procs.append(proc)
        return proc.wait_ready() if ready else proc

    def start_beat(self, env: dict[str, str] | None = None) -> Proc:
        argv = [sys.executable, "-m", "training_platform.cli", "beat"]
        proc = Proc(argv, {**self.env, **(env or {})}, self.data_dir / "beat.log")
        self.procs.append(proc)
        return proc.wait_ready()

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.procs.clear()

    # -- database
    def user(self, name: str = "alice"):
        from sqlmodel import select

        from training_platform.db import crud
        from training_platform.db.models import User
        from training_platform.db.session import session_scope

        with session_scope() as s:
            user = s.exec(select(User).where(User.name == name)).first()
            if user is None:
                user, _ = crud.create_user(s, name)
            s.expunge(user)
            return user

    def submit(self, config: dict, *, name: str = "job", priority: int = 0, wake: bool = True) -> int:
        from training_platform.db import crud
        from training_platform.db.session import session_scope
        from training_platform.taskqueue.wake import wake_worker

        owner = self.user()
        with session_scope() as s:
            job = crud.create_job(s, owner=owner, name=name, config=config, priority=priority)
            job_id = job.id
        if wake:
            wake_worker("train", priority)
        return job_id

    def job(self, job_id: int):
        from training_platform.db.models import Job
        from training_platform.db.session import session_scope

        with session_scope() as s:
            job = s.get(Job, job_id)
            s.expunge(job)
            return job

    def wait_status(self, job_id: int, statuses: set[str] | str, timeout: float = 120):
        statuses = {statuses} if isinstance(statuses, str) else statuses

        def check():
            job = self.job(job_id)
            return job if job.status in statuses else None

        try:
            return wait_for(check, timeout, interval=0.25, what=f"job {job_id} in {statuses}")
        except AssertionError:
            raise AssertionError(
                f"job {job_id} is {self.job(job_id).status}, expected {statuses}\n"
                f"events: {self.events(job_id)}\n{self.logs_tail()}"
            ) from None

    def events(self, job_id: int) -> list[tuple[str | None, str, str, Any]]:
        from sqlmodel import select

        from training_platform.db.models import JobEvent
        from training_platform.db.session import session_scope

        with session_scope() as s:
            rows = s.exec(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)).all()
            return [(e.from_status, e.to_status, e.reason, e.ts) for e in rows]

    def metrics(self, job_id: int, name: str | None = None) -> list[tuple[str, int, float]]:
        from sqlmodel import select

        from training_platform.db.models import MetricPoint
        from training_platform.db.session import session_scope

        with session_scope() as s:
            q = select(MetricPoint.name, MetricPoint.step, MetricPoint.value).where(MetricPoint.job_id == job_id)
            if name is not None:
                q = q.where(MetricPoint.name == name)
            return [tuple(r) for r in s.exec(q.order_by(MetricPoint.name, MetricPoint.step)).all()]

    def checkpoints(self, job_id: int):
        from sqlmodel import select

        from training_platform.db.models import Checkpoint
        from training_platform.db.session import session_scope

        with session_scope() as s:
            rows = s.exec(select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)).all()
            for r in rows:
                s.expunge(r)
            return list(rows)

    def set_cancel(self, job_id: int) -> None:
        from training_platform.db.models import Job
        from training_platform.db.session import session_scope

        with session_scope() as s:
            job = s.get(Job, job_id)
            job.cancel_requested = True
            s.add(job)

    def logs_tail(self, n: int = 4000) -> str:
        out = []
        for proc in self.procs:
            out.append(f"--- {proc.log_file.name}\n{proc.log()[-n:]}")
        for console in sorted((self.data_dir / "runs").glob("*.console.log")):
            lines = [ln for ln in console.read_text(errors="replace").splitlines() if "it/s]" not in ln]
            out.append(f"--- {console.name}\n" + "\n".join(lines[-40:]))
        return "\n".join(out)


def checkpoint_sha_from_disk(directory: Path) -> tuple[str, int]:
    """The platform's checkpoint digest recomputed from the files: sha256 over sorted `relpath:sha256` lines."""
    import hashlib

    from training_platform.core.files import sha256_file

    files = sorted(p for p in directory.rglob("*") if p.is_file())
    lines = "".join(f"{p.relative_to(directory)}:{sha256_file(p)}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest(), sum(p.stat().st_size for p in files)


def assert_metric_history(plat: Platform, job_id: int, run_dir: Path, max_steps: int) -> None:
    """Contiguous loss steps 1..max_steps, no (name, step) twice, and the DB equals the run's metrics.jsonl."""
    import json

    points = plat.metrics(job_id)
    keys = [(name, step) for name, step, _ in points]
    assert len(keys) == len(set(keys)), "a metric point is duplicated"
    loss = {step: value for name, step, value in points if name == "loss"}
    assert sorted(loss) == list(range(1, max_steps + 1)), f"loss steps not contiguous: {sorted(loss)}"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    file_loss = {r["step"]: r["loss"] for r in records if "loss" in r}
    assert file_loss == loss, "DB loss series differs from metrics.jsonl"


def run_sft_happy_path(plat: Platform, max_steps: int = 30) -> dict[str, float]:
    """Submit one SFT job, watch it run (metrics must arrive while it runs), check the end state. Returns timings."""
    from training_platform.db.models import TERMINAL

    t0 = time.monotonic()
    job_id = plat.submit(sft_config(max_steps, keep_last_checkpoints=2), name="happy")
    seen_running: list[int] = []
    t_running = None
    deadline = time.monotonic() + 150
    while True:
        job = plat.job(job_id)
        if job.status == "running":
            t_running = t_running or time.monotonic()
            seen_running.append(len(plat.metrics(job_id, "loss")))
        if job.status in TERMINAL:
            break
        assert time.monotonic() < deadline, f"job stuck in {job.status}\n{plat.logs_tail()}"
        time.sleep(0.2)
    t_done = time.monotonic()
    assert job.status == "succeeded", f"{job.status}: {job.error}\n{plat.logs_tail()}"
    assert job.attempts == 1 and job.error is None
    assert job.current_step == max_steps
    assert any(0 < n < max_steps for n in seen_running), f"no metrics seen while running: {seen_running}"

    assert [(e[0], e[1]) for e in plat.events(job_id)] == [
        (None, "queued"),
        ("queued", "preflight"),
        ("preflight", "running"),
        ("running", "succeeded"),
    ]
    report = job.preflight
    assert report["ok"] is True and [c["name"] for c in report["checks"]] == ["config", "memory", "tokenizer", "disk"]

    run_dir = Path(job.run_dir)
    assert run_dir == plat.data_dir / "runs" / f"job-{job_id}"
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert_metric_history(plat, job_id, run_dir, max_steps)

    checkpoints = plat.checkpoints(job_id)
    assert [c.step for c in checkpoints] == list(range(10, max_steps + 1, 10))
    live = [c for c in checkpoints if not c.removed]
    assert [c.step for c in live] == [max_steps - 10, max_steps]  # keep_last_checkpoints: 2, older ones removed
    for c in checkpoints:
        assert Path(c.path).is_dir() != c.removed, c
    for c in live:
        assert (c.sha256, c.size_bytes) == checkpoint_sha_from_disk(Path(c.path))
    return {
        "job_id": job_id,
        "created_to_running_s": job.started_at.timestamp() - job.created_at.timestamp(),
        "submit_to_running_poll_s": (t_running or t_done) - t0,
        "submit_to_done_s": t_done - t0,
    }


def claim_until_empty(kind: str, worker: str, barrier) -> list[int]:
    """Run in a separate process: claim `kind` jobs as fast as possible until none is left."""
    from training_platform.db.session import get_engine
    from training_platform.workers.supervisor import claim_next_job

    with get_engine().connect():  # imports done and a pooled connection open before the start line
        pass
    barrier.wait(timeout=120)  # every racer is ready: they really race (a start time missed under load did not)
    claimed = []
    while (job_id := claim_next_job(kind, worker)) is not None:
        claimed.append(job_id)
        time.sleep(0.002)  # a real worker does something between claims; without it one process can keep the lock
    return claimed


def assert_claims_race_free(plat: Platform, n_jobs: int = 24, n_procs: int = 4) -> None:
    """Many processes claiming at once: every job claimed exactly once, one claim event each."""
    import multiprocessing

    from sqlmodel import select

    from training_platform.db import crud
    from training_platform.db.models import Job, JobEvent
    from training_platform.db.session import session_scope

    owner = plat.user()
    kind = f"race{os.getpid() % 1000}"
    with session_scope() as s:
        ids = [
            crud.create_job(
                s, owner=owner, name=f"r{i}", config={"algorithm": {"name": "sft"}}, kind=kind, priority=i % 3
            ).id
            for i in range(n_jobs)
        ]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(n_procs) as pool:
        barrier = manager.Barrier(n_procs)
        results = pool.starmap(claim_until_empty, [(kind, f"racer-{i}", barrier) for i in range(n_procs)])
    claimed = [job_id for r in results for job_id in r]
    assert sorted(claimed) == sorted(ids), "a job was claimed twice or not at all"
    assert sum(1 for r in results if r) >= 2, f"no real race happened: {[len(r) for r in results]}"
    with session_scope() as s:
        jobs = s.exec(select(Job).where(Job.id.in_(ids))).all()
        assert all(j.status == "preflight" and j.attempts == 1 for j in jobs)
        for racer, got in enumerate(results):
            assert all(j.worker == f"racer-{racer}" for j in jobs if j.id in got)
        claims = s.exec(
            select(JobEvent.job_id).where(JobEvent.job_id.in_(ids), JobEvent.to_status == "preflight")
        ).all()
        assert sorted(claims) == sorted(ids)
