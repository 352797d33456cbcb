"""`tp up`: everything on one machine (migrate, embedded Redis, demo assets, bootstrap admin, then api + worker +
eval worker + inference worker + beat) as children of one process supervisor (see docs/operations.md):
- every child (the embedded Redis, api, worker, eval-worker, beat) runs in its own process group and gets SIGTERM
  if `tp up` dies, even by SIGKILL (`prctl(PR_SET_PDEATHSIG)`), so nothing outlives it;
- a child that exits is restarted after a backoff (1 s, 2 s, 4 s, ... up to TP_UP_BACKOFF_MAX), with a log line;
  what is left of its process group gets SIGTERM (SIGKILL later), and a child holding a port (api, Redis) is
  restarted only once its old group is gone. The embedded Redis comes back on the same port, so the workers and
  the API reconnect to the same URL;
- a child that crashed TP_UP_MAX_CRASHES times within TP_UP_CRASH_WINDOW seconds is not restarted again: `tp up`
  stops everything and exits 1 with a message naming it;
- Ctrl-C / SIGTERM stops the api and the workers (a running job checkpoints and is requeued), then Redis;
- the embedded Redis's pid goes to `$TP_DATA_DIR/redis.rdb.pid`: a Redis left running by an earlier run (one that
  predates the death signal, or a `kill -9` race) is found there and stopped, after checking the pid is a
  `redis-server` working in this data directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from training_platform.cli.processes import (
    EmbeddedRedis,
    LocalRayHead,
    api_app_exists,
    api_argv,
    beat_argv,
    bootstrap,
    child_env,
    default_api_workers,
    free_port,
    inference_worker_argv,
    lock_data_dir,
    stop_stale_redis,
    training_worker_concurrency,
    worker_argv,
)
from training_platform.core.procutil import die_with_parent

# ---------------------------------------------------------------------------------------------- supervision


@dataclass
class RestartPolicy:
    """Restart with exponential backoff; give up when one child crashed `max_crashes` times within `window_s`."""

    max_crashes: int = 5
    window_s: float = 300.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0

    @classmethod
    def from_settings(cls, settings) -> RestartPolicy:
        return cls(
            max_crashes=settings.up_max_crashes,
            window_s=settings.up_crash_window_s,
            backoff_max_s=settings.up_backoff_max_s,
        )

    def backoff(self, recent_crashes: int) -> float:
        return min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, recent_crashes - 1))


@dataclass
class Child:
    name: str
    argv: list[str]
    # Restart only once the dead child's process group is gone (it may still hold the child's port: uvicorn's
    # worker processes, Redis). False for Celery workers: a training process left behind checkpoints and exits on
    # its own (the new worker's run lock waits for it), which must not delay the restart.
    wait_for_group: bool = True
    on_start: Callable[[int], None] | None = None
    proc: subprocess.Popen | None = None
    crashes: deque = field(default_factory=deque)
    restart_at: float | None = None
    restarts: int = 0


@dataclass
class _Leftover:
    name: str
    pgid: int
    kill_at: float
    killed: bool = False


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class ProcessSupervisor:
    """`tp up`'s children: start, restart with backoff, give up, stop. Call `check()` every ~0.5 s."""

    def __init__(
        self,
        env: dict[str, str],
        policy: RestartPolicy | None = None,
        *,
        echo=print,
        group_grace_s: float = 10.0,
        worker_grace_s: float = 60.0,
        clock=time.monotonic,
    ):
        self.env = env
        self.policy = policy or RestartPolicy()
        self.echo = echo
        self.group_grace_s = group_grace_s
        self.worker_grace_s = worker_grace_s
        self.clock = clock
        self.children: dict[str, Child] = {}
        self.leftovers: list[_Leftover] = []

    def add(
        self, name: str, argv: list[str], *, wait_for_group: bool = True, on_start: Callable[[int], None] | None = None
    ) -> Child:
        child = Child(name, argv, wait_for_group=wait_for_group, on_start=on_start)
        self.children[name] = child
        return child

    def start(self, name: str) -> subprocess.Popen:
        child = self.children[name]
        # Its own session (a terminal's Ctrl-C reaches only `tp up`, which stops everything in order; a signal to
        # the group reaches a worker's pool and training processes too). SIGTERM when `tp up` dies, even by SIGKILL.
        child.proc = subprocess.Popen(
            child.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        child.restart_at = None
        if child.on_start is not None:
            child.on_start(child.proc.pid)
        return child.proc

    def pid(self, name: str) -> int | None:
        proc = self.children[name].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def check(self) -> str | None:
        """One supervision round. Returns a message when a child crashed too often (the caller stops everything)."""
        now = self.clock()
        self._reap_leftovers(now)
        for child in self.children.values():
            if child.proc is not None:
                returncode = child.proc.poll()
                if returncode is None:
                    continue
                pid, child.proc = child.proc.pid, None
                self._retire_group(child.name, pid, now, child.wait_for_group)
                child.crashes.append(now)
                while child.crashes and child.crashes[0] < now - self.policy.window_s:
                    child.crashes.popleft()
                n = len(child.crashes)
                if n >= self.policy.max_crashes:
                    return (
                        f"giving up: {child.name} (pid {pid}) {describe_exit(returncode)}; it exited {n} times "
                        f"within {self.policy.window_s:.0f}s (TP_UP_MAX_CRASHES={self.policy.max_crashes}, "
                        f"TP_UP_CRASH_WINDOW={self.policy.window_s:.0f}); see its output above"
                    )
                delay = self.policy.backoff(n)
                child.restart_at = now + delay
                self.echo(
                    f"{child.name} (pid {pid}) {describe_exit(returncode)}: restarting it in {delay:.0f}s "
                    f"(exit {n} of at most {self.policy.max_crashes - 1} within "
                    f"{self.policy.window_s:.0f}s)"
                )
            elif child.restart_at is not None and now >= child.restart_at:
                if child.wait_for_group and any(left.name == child.name for left in self.leftovers):
                    continue  # its old processes are still going (SIGKILL follows after group_grace_s)
                proc = self.start(child.name)
                child.restarts += 1
                self.echo(f"{child.name} restarted (pid {proc.pid}, restart {child.restarts})")
        return None

    def _retire_group(self, name: str, pgid: int, now: float, wait_for_group: bool) -> None:
        if not _group_alive(pgid):
            return
        _signal_group(pgid, signal.SIGTERM)
        grace = self.group_grace_s if wait_for_group else self.worker_grace_s
        self.leftovers.append(_Leftover(name, pgid, kill_at=now + grace))

    def _reap_leftovers(self, now: float) -> None:
        for left in list(self.leftovers):
            if not _group_alive(left.pgid):
                self.leftovers.remove(left)
            elif now >= left.kill_at and not left.killed:
                self.echo(f"{left.name}: processes of the exited one (group {left.pgid}) still running: SIGKILL")
                _signal_group(left.pgid, signal.SIGKILL)
                left.killed = True

    def stop(
        self, grace_s: float, *, last: tuple[str, ...] = ("redis", "ray-head"), last_grace_s: float = 15.0
    ) -> None:
        """SIGTERM every child's group but `last`, wait up to `grace_s` (a worker first stops its training job with a
        checkpoint and requeues it), SIGKILL what is left; then the same for `last` (the broker and the Ray head go
        last)."""
        for child in self.children.values():
            child.restart_at = None
        first = [name for name in self.children if name not in last]
        self._stop_groups(first, grace_s)
        self._stop_groups([name for name in self.children if name in last], last_grace_s)

    def _stop_groups(self, names: list[str], grace_s: float) -> None:
        procs = {name: proc for name in names if (proc := self.children[name].proc) is not None}
        groups = [(name, proc.pid) for name, proc in procs.items()]
        groups += [(left.name, left.pgid) for left in self.leftovers if left.name in names]
        for proc in procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_group_alive(pgid) for _, pgid in groups):
            time.sleep(0.2)
        for name, pgid in groups:
            if _group_alive(pgid):
                self.echo(f"{name} did not stop within {grace_s:.0f}s: SIGKILL")
                _signal_group(pgid, signal.SIGKILL)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.leftovers = [left for left in self.leftovers if left.name not in names]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _group_has_live_members(pgid)


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


def _started(proc: subprocess.Popen, ready: Callable[[], bool], timeout_s: float) -> bool:
    """Wait until a service child answers (`ready`); False if it exits or does not answer in time."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def run_platform(
    *, host: str, port: int, app: str, grace_s: float, api_workers: int = 1, ray: bool = False, echo=print
) -> int:
    """`tp up`. Returns the exit code."""
    from training_platform.core.settings import get_settings
    from training_platform.db.migrate import upgrade
    from training_platform.db.session import get_engine

    settings = get_settings()
    data_dir = settings.data_path
    data_dir.mkdir(parents=True, exist_ok=True)
    if not api_app_exists(app):
        echo(f"error: the API application {app!r} cannot be imported")
        return 2
    lock_fd = lock_data_dir(data_dir)
    if lock_fd is None:
        echo(f"error: another `tp up` is running on {data_dir} (it holds {data_dir / 'up.lock'})")
        return 2
    echo(f"data directory: {data_dir}")
    echo(f"database: {redact_url(settings.db_url)}")
    upgrade()
    from training_platform.core.telemetry import (
        reset_multiproc_dir,  # /metrics' shared files: empty, exported to children
    )

    reset_multiproc_dir()

    redis = None
    if not settings.redis_url:
        redis = EmbeddedRedis(data_dir, free_port())
        stop_stale_redis(redis.pid_file, data_dir, echo=echo)
    else:
        echo(f"Redis: {redact_url(settings.redis_url)}")
    env = child_env(data_dir, redis.url if redis else None)
    ray_head = None
    if ray:
        ray_head = LocalRayHead(data_dir, free_port(), num_cpus=default_api_workers())
        env.update(ray_head.env())
    supervisor = ProcessSupervisor(env, RestartPolicy.from_settings(settings), echo=echo, worker_grace_s=grace_s)
    stop_requested: list[int] = []

    def on_signal(signum, frame):
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        if redis is not None:
            supervisor.add("redis", redis.argv(), on_start=redis.record_pid)
            if not _started(supervisor.start("redis"), redis.ready, 30):
                echo(f"error: the embedded Redis did not start (see {data_dir / 'redis.log'})")
                return 1
            echo(f"embedded Redis: {redis.url} (persisting to {redis.rdb_file})")
        if ray_head is not None:
            supervisor.add("ray-head", ray_head.argv())
            if not _started(supervisor.start("ray-head"), ray_head.ready, 60):
                echo(f"error: the local Ray head did not start (see {ray_head.temp_dir}/session_latest/logs)")
                return 1
            echo(f"local Ray head: {ray_head.address} (token auth; jobs with resources.launcher ray run on it)")
        bootstrap(data_dir, echo=echo)
        get_engine().dispose()  # the children open their own connections
        supervisor.add("api", api_argv(host=host, port=port, app=app, workers=api_workers))
        supervisor.add(
            "worker",
            worker_argv(
                queues="train,data", concurrency=training_worker_concurrency(), name=f"worker-{os.getpid()}@%h"
            ),
            wait_for_group=False,
        )
        # Evaluations get their own worker: a checkpoint is evaluated while its training job still runs.
        supervisor.add("eval-worker", worker_argv(queues="eval", name=f"eval-{os.getpid()}@%h"), wait_for_group=False)
        # Generation for the playground and /openai/v1: answers in seconds, never behind a job.
        supervisor.add(
            "inference-worker", inference_worker_argv(name=f"inference-{os.getpid()}@%h"), wait_for_group=False
        )
        supervisor.add("beat", beat_argv(data_dir / "celerybeat-schedule"))
        for name in ("api", "worker", "eval-worker", "inference-worker", "beat"):
            supervisor.start(name)
        echo(
            f"API listening on http://{host}:{port} ({api_workers} process{'es' if api_workers > 1 else ''}; "
            f"Ctrl-C stops everything)"
        )
        while not stop_requested:
            message = supervisor.check()
            if message:
                echo(message)
                code = 1
                break
            time.sleep(0.5)
    finally:
        if stop_requested:
            what = "api, workers, beat" + (", then the embedded Redis" if redis else "")
            echo(f"{signal.Signals(stop_requested[0]).name}: stopping {what} ...")
        supervisor.stop(grace_s)
        if redis is not None:
            redis.pid_file.unlink(missing_ok=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(lock_fd)
        echo("stopped")
    return code


def redact_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001
        return url.split("@")[-1]
