"""`tp db upgrade`, `tp users create` and a `tp up` smoke test (real processes, embedded Redis)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from _wk import REPO, wait_for

pytestmark = pytest.mark.integration

TP = [sys.executable, "-m", "training_platform.cli"]


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(TP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **extra)
    return env


def _tp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TP, *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_users_create_prints_the_token_alone_on_its_last_line(tmp_path):
    env = _env(tmp_path)
    before = _tp(env, "users", "create", "carol")
    assert before.returncode == 2 and "tp db upgrade" in before.stderr

    assert _tp(env, "db", "upgrade").returncode == 0
    proc = _tp(env, "users", "create", "carol", "--admin")
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"tp_[A-Za-z0-9_-]{40,}", token)

    from sqlalchemy import create_engine
    from sqlmodel import Session

    from training_platform.db import crud

    engine = create_engine(f"sqlite:///{tmp_path / 'platform.db'}")
    with Session(engine) as session:
        user = crud.user_for_token(session, token)
        assert user is not None and user.name == "carol" and user.is_admin
    engine.dispose()

    again = _tp(env, "users", "create", "carol")
    assert again.returncode == 2
    assert "already exists" in again.stderr and again.stdout == ""


SUBMIT = """
import sys
from sqlmodel import select
from training_platform.db import crud
from training_platform.db.models import User
from training_platform.db.session import session_scope
from training_platform.training.config import load_yaml
from training_platform.taskqueue.wake import wake_worker

cfg = load_yaml(sys.argv[1])
cfg["training"].update(max_steps=5000, logging_steps=1, save_steps=5000, eval_steps=5000)
with session_scope() as s:
    job = crud.create_job(s, owner=s.exec(select(User)).first(), name="long", config=cfg)
    print(job.id)
wake_worker("train", 0)
"""


def _job_row(data_dir: Path, job_id: int) -> dict:
    from sqlalchemy import create_engine
    from sqlalchemy import text as sql

    engine = create_engine(f"sqlite:///{data_dir / 'platform.db'}")
    with engine.connect() as conn:
        row = conn.execute(sql("SELECT status, current_step, run_dir FROM jobs WHERE id = :id"), {"id": job_id})
        status, step, run_dir = row.one()
        events = conn.execute(
            sql("SELECT to_status, reason FROM job_events WHERE job_id = :id ORDER BY id"), {"id": job_id}
        ).all()
        checkpoints = [
            r[0] for r in conn.execute(sql("SELECT step FROM checkpoints WHERE job_id = :id"), {"id": job_id}).all()
        ]
    engine.dispose()
    return {"status": status, "step": step, "run_dir": run_dir, "events": events, "checkpoints": checkpoints}


def _run_up(data_dir: Path, app: str | None, env_extra: dict[str, str], with_job: bool = False) -> None:
    port = _free_port()
    log_file = data_dir.parent / f"{data_dir.name}-up.log"
    args = [*TP, "up", "--port", str(port), "--grace", "30"] + (["--app", app] if app else [])
    with log_file.open("wb") as log:
        up = subprocess.Popen(args, env=_env(data_dir, **env_extra), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    output = lambda: log_file.read_text(errors="replace")  # noqa: E731
    try:
        wait_for(lambda: _health(port) or up.poll() is not None, 120, interval=0.5, what="/health")
        assert up.poll() is None, output()[-3000:]
        text = output()
        assert f"API listening on http://127.0.0.1:{port}" in text
        redis_url = re.search(r"embedded Redis: (redis://127\.0\.0\.1:(\d+)/0)", text)
        assert redis_url, text
        redis_port = redis_url.group(2)
        printed_token = text.split("created the admin user", 1)[1].splitlines()[1].strip()
        token_file = data_dir / "admin.token"
        assert token_file.read_text().strip() == printed_token
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

        from sqlalchemy import create_engine
        from sqlalchemy import text as sql

        engine = create_engine(f"sqlite:///{data_dir / 'platform.db'}")
        with engine.connect() as conn:
            models = dict(conn.execute(sql("SELECT name, path FROM models")).all())
        engine.dispose()
        assert set(models) == {"demo-tiny", "demo-reward"}
        assert Path(models["demo-tiny"], "config.json").is_file()

        family = psutil.Process(up.pid).children(recursive=True)
        names = " ".join(" ".join(_cmdline(p)) for p in family)
        assert "training_platform.api.serve" in names and "worker -Q train" in names and "--beat" in names
        redis = [
            p
            for p in psutil.process_iter(["cmdline"])
            if f"127.0.0.1:{redis_port}" in " ".join(p.info["cmdline"] or [])
            and "redis-server" in " ".join(p.info["cmdline"] or [])
        ]
        assert len(redis) == 1

        job_id = None
        if with_job:  # a job running when the platform stops: it checkpoints and goes back to the queue
            env = _env(data_dir, REDIS_URL=redis_url.group(1), **env_extra)
            submitted = subprocess.run(
                [sys.executable, "-c", SUBMIT, str(REPO / "configs/examples/sft_tiny.yaml")],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                cwd=REPO,
            )
            assert submitted.returncode == 0, submitted.stderr
            job_id = int(submitted.stdout.strip())
            wait_for(lambda: _job_row(data_dir, job_id)["step"] >= 2, 90, what="the job to train a few steps")
            family = psutil.Process(up.pid).children(recursive=True)
            assert "training_platform.cli train" in " ".join(" ".join(_cmdline(p)) for p in family)

        t0 = time.monotonic()
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=90) == 0, output()[-3000:]
        print(f"\n[tp up] stopped in {time.monotonic() - t0:.1f}s")
        gone, alive = psutil.wait_procs(family + redis, timeout=10)
        assert not alive, f"still running after tp up stopped: {[p.cmdline() for p in alive]}"
        assert (data_dir / "redis.rdb").is_file()
        assert output().rstrip().endswith("stopped")
        if job_id is not None:
            job = _job_row(data_dir, job_id)
            assert job["status"] == "queued", job
            assert "(worker shutting down) without a cancel request: requeued" in job["events"][-1][1]
            assert job["checkpoints"] == [job["step"]]  # the stop checkpoint the next start resumes from
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def _cmdline(process) -> list[str]:
    """A short-lived helper may already be a zombie (or gone) when we look: it has no command line then."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


STUB_APP = """
from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health():
    return {"status": "ok"}
"""


def test_up_starts_and_stops_everything_with_a_stub_api(tmp_path, demo_assets):
    """The orchestration of `tp up` (migrate, embedded Redis, demo models, admin, api + worker + beat, clean stop
    that checkpoints and requeues a running job), with a stand-in ASGI app so it does not depend on the API."""
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "stub_api.py").write_text(STUB_APP)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "demo").symlink_to(demo_assets)  # complete assets: prepare_demo keeps them
    _run_up(data_dir, "stub_api:app", {"PYTHONPATH": str(tmp_path / "stub")}, with_job=True)


@pytest.mark.skipif(
    importlib.util.find_spec("training_platform.api") is None
    or importlib.util.find_spec("training_platform.api.app") is None,
    reason="training_platform.api.app does not exist yet (the API is being written concurrently)",
)
def test_up_serves_the_real_api(tmp_path, demo_assets):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "demo").symlink_to(demo_assets)
    _run_up(data_dir, None, {})
