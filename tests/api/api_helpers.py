"""Helpers shared by the API tests: the test environment (settings, database, broker), the API client wrapper,
and direct database access for arranging job states and counting rows.

Settings and the engine are cached (lru_cache) and the Celery app binds its broker at import, so `platform_env`
sets the variables, clears the caches and points the Celery app at the test broker, and undoes all of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import func
from sqlmodel import select

from training_platform.db import crud
from training_platform.db.models import Checkpoint, Job, JobEvent, JobStatus, MetricPoint, RegisteredModel
from training_platform.db.session import session_scope
from training_platform.services import jobs as job_service

API = "/api/v1"
REPO = Path(__file__).resolve().parents[2]
REDIS_TEST_URL = os.environ.get("TP_TEST_API_REDIS_URL", "redis://127.0.0.1:6379/15")
# Overridable to run the PostgreSQL half elsewhere: the admin DSN creates/drops tp_test_* databases.
PG_ADMIN_DSN = os.environ.get(
    "TP_TEST_PG_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
)
PG_URL = os.environ.get("TP_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/{name}")

# The paths a job takes through the state machine to reach each status.
PATH_TO = {
    "queued": [],
    "preflight": ["preflight"],
    "running": ["preflight", "running"],
    "succeeded": ["preflight", "running", "succeeded"],
    "failed": ["failed"],
    "cancelled": ["cancelled"],
}


def row_counts() -> dict[str, int]:
    with session_scope() as s:
        return {
            model.__name__: s.exec(select(func.count()).select_from(model)).one()
            for model in (Job, JobEvent, MetricPoint, Checkpoint, RegisteredModel)
        }


def set_status(job_id: int, status: str, **fields) -> None:
    """Walk the job along the state machine (as a worker would) and set extra columns."""
    with session_scope() as s:
        job = s.get(Job, job_id)
        for step in PATH_TO[status]:
            job_service.transition(s, job, JobStatus(step), reason="test")
        for key, value in fields.items():
            setattr(job, key, value)
        s.add(job)


def update_job(job_id: int, **fields) -> None:
    with session_scope() as s:
        job = s.get(Job, job_id)
        for key, value in fields.items():
            setattr(job, key, value)
        s.add(job)


def transition(job_id: int, to: str, reason: str = "test") -> None:
    with session_scope() as s:
        job_service.transition(s, s.get(Job, job_id), JobStatus(to), reason=reason)


def get_job_row(job_id: int) -> Job | None:
    with session_scope() as s:
        return s.get(Job, job_id)


def make_run_dir(data_dir: Path, job_id: int, log_lines: list[str] | None = None) -> Path:
    run = data_dir / "runs" / f"job-{job_id}-{id(log_lines)}"
    (run / "checkpoints").mkdir(parents=True)
    if log_lines is not None:
        (run / "train.log").write_text("".join(f"{line}\n" for line in log_lines))
    return run


def point_celery_at(url: str) -> str:
    """Re-bind the import-time Celery app to `url` (its connection/producer pools are cached). Returns the old URL."""
    from training_platform.taskqueue.app import app

    old = app.conf.broker_url
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None
    return old


@contextmanager
def postgres_database() -> Iterator[str]:
    import psycopg

    try:
        admin = psycopg.connect(PG_ADMIN_DSN, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL ({PG_ADMIN_DSN}) is unreachable: {str(exc).strip()[:200]}")
    name = f"tp_test_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield PG_URL.format(name=name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _clear_caches() -> None:
    from training_platform.core.settings import get_settings
    from training_platform.db.session import get_engine

    get_settings.cache_clear()
    get_engine.cache_clear()


@contextmanager
def platform_env(data_dir: Path, db_url: str, **env: str) -> Iterator[None]:
    from training_platform.db.migrate import upgrade
    from training_platform.db.session import get_engine

    mp = pytest.MonkeyPatch()
    mp.setenv("TP_DATA_DIR", str(data_dir))
    mp.setenv("DATABASE_URL", db_url)
    mp.setenv("REDIS_URL", REDIS_TEST_URL)
    mp.setenv("TP_AUTH_MODE", "token")
    mp.delenv("TP_MODEL_ROOTS", raising=False)
    for key, value in env.items():
        mp.setenv(key, value)
    _clear_caches()
    old_broker = point_celery_at(os.environ["REDIS_URL"])
    try:
        upgrade(db_url)
        yield
    finally:
        get_engine().dispose()
        mp.undo()
        _clear_caches()
        point_celery_at(old_broker)


@contextmanager
def database(kind: str, tmp_dir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_dir / 'platform.db'}"
    else:
        with postgres_database() as url:
            yield url


# ---------------------------------------------------------------------------------------------- the API


@dataclass
class Api:
    client: object
    data_dir: Path
    db_url: str
    tokens: dict[str, str] = field(default_factory=dict)
    user_ids: dict[str, int] = field(default_factory=dict)

    def h(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def get(self, path: str, user: str = "alice", **kw):
        return self.client.get(API + path, headers={**self.h(user), **kw.pop("headers", {})}, **kw)

    def post(self, path: str, user: str = "alice", **kw):
        return self.client.post(API + path, headers={**self.h(user), **kw.pop("headers", {})}, **kw)

    def delete(self, path: str, user: str = "alice", **kw):
        return self.client.delete(API + path, headers={**self.h(user), **kw.pop("headers", {})}, **kw)

    def patch(self, path: str, user: str = "alice", **kw):
        return self.client.patch(API + path, headers={**self.h(user), **kw.pop("headers", {})}, **kw)

    def put(self, path: str, user: str = "alice", **kw):
        return self.client.put(API + path, headers={**self.h(user), **kw.pop("headers", {})}, **kw)


@contextmanager
def running_api(data_dir: Path, db_url: str, **env: str) -> Iterator[Api]:
    from fastapi.testclient import TestClient

    from training_platform.api.app import create_app
    from training_platform.db.session import session_scope

    with platform_env(data_dir, db_url, **env):
        api = Api(client=None, data_dir=data_dir, db_url=db_url)
        with session_scope() as session:
            for name, admin in (("root", True), ("alice", False), ("bob", False)):
                user, token = crud.create_user(session, name, is_admin=admin)
                api.tokens[name], api.user_ids[name] = token, user.id
        with TestClient(create_app()) as client:
            api.client = client
            yield api


def valid_config(**sections) -> dict:
    config = {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/sft.jsonl", "max_length": 64},
        "algorithm": {"name": "sft"},
        "training": {"max_steps": 5, "per_device_batch_size": 4},
    }
    config.update(sections)
    return config


def run_data_job(job_id: int, timeout: float = 60) -> None:
    """Run the queued data job `job_id` here, as a worker would (claimed by id); if a real worker took it first,
    wait for it to end."""
    import time

    from sqlalchemy import update
    from sqlmodel import select

    from training_platform.core.timeutil import utcnow
    from training_platform.db.models import Job, JobEvent
    from training_platform.db.session import session_scope
    from training_platform.workers.data_tasks import DataJobSupervisor

    worker = "in-test@local"
    with session_scope() as session:
        claimed = session.exec(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued")
            .values(
                status="preflight", worker=worker, heartbeat_at=utcnow(), attempts=Job.attempts + 1, updated_at=utcnow()
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        if claimed:
            session.add(
                JobEvent(job_id=job_id, from_status="queued", to_status="preflight", reason=f"claimed by {worker}")
            )
    if claimed:
        DataJobSupervisor(job_id, worker).run()
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with session_scope() as session:
            if session.exec(select(Job.status).where(Job.id == job_id)).one() in _TERMINAL_STATUSES:
                return
        time.sleep(0.2)
    raise AssertionError(f"data job {job_id} did not finish in {timeout}s")


_TERMINAL_STATUSES = {"succeeded", "failed", "cancelled"}


def ingested(api, accepted, user: str = "alice") -> dict:
    """An upload or registration (202) followed to its stored version: its ingest data job run here, as a worker
    would. Returns {"dataset": ..., "version": ..., "created": ..., "job": ...} (the version's detail)."""
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job"]["id"]
    run_data_job(job_id)
    job = api.get(f"/jobs/{job_id}", user=user).json()
    assert job["status"] == "succeeded", job
    result = job["config"]["result"]
    dataset_id, version_id = result["dataset_id"], result["version_id"]
    return {
        "dataset": api.get(f"/datasets/{dataset_id}", user=user).json(),
        "version": api.get(f"/datasets/{dataset_id}/versions/{version_id}", user=user).json(),
        "created": result["created"],
        "job": job,
    }


@contextmanager
def inference_worker(redis_url: str, log_dir: Path, name: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A real inference worker process (`tp worker --inference`'s argv) on the Redis db of `redis_url`, flushed
    before and after: yields once it heartbeats (torch and transformers imported), with its log file. Start it inside
    `running_api(...)`: it inherits the settings that sets (data dir, database)."""
    import redis

    from training_platform.cli.processes import inference_worker_argv
    from training_platform.inference import channel

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"the local Redis at {redis_url} is unreachable: {exc}")
    client.flushdb()
    log_file = log_dir / "worker.log"
    env = {**os.environ, "REDIS_URL": redis_url, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["OMP_NUM_THREADS"] = "1"
    with log_file.open("wb") as log:
        worker = subprocess.Popen(
            inference_worker_argv(name=f"{name}-{uuid.uuid4().hex[:8]}@%h"),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not client.zcount(channel.WORKERS_KEY, channel.live_worker_floor(), "+inf"):
            assert worker.poll() is None, f"the inference worker exited:\n{log_file.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no heartbeat from the inference worker:\n{log_file.read_text()}"
            time.sleep(0.2)
        yield worker, log_file
    finally:
        stop_process_group(worker)
        client.flushdb()
        client.close()


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGCONT (a test may have stopped it) and SIGTERM to its process group; SIGKILL after 30 s."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def live_inference_workers(redis_url: str) -> int:
    """Inference workers whose heartbeat is fresh (a stopping worker takes itself off the list)."""
    import redis

    from training_platform.inference import channel

    with redis.Redis.from_url(redis_url) as client:
        return client.zcount(channel.WORKERS_KEY, channel.live_worker_floor(), "+inf")
