"""`tp up`'s supervisor on its own, with small stand-in children (real processes, a few seconds): restart with
backoff and a log line, the old process group cleared before a restart, giving up after repeated exits, stopping
everything; and the stale embedded Redis found by its pid file."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from _wk import wait_for

from training_platform.cli.process_supervisor import ProcessSupervisor, RestartPolicy
from training_platform.cli.processes import EmbeddedRedis, free_port, stop_stale_redis

pytestmark = pytest.mark.integration

PY = sys.executable


def _run(supervisor: ProcessSupervisor, until, timeout: float = 20):
    """check() every 50 ms until `until()` is true; returns the give-up message if there was one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = supervisor.check()
        if message or until():
            return message
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_child_that_exits_is_restarted_with_backoff_then_given_up_on():
    lines: list[str] = []
    policy = RestartPolicy(max_crashes=4, window_s=60, backoff_initial_s=0.1, backoff_max_s=0.4)
    supervisor = ProcessSupervisor(dict(os.environ), policy, echo=lines.append)
    supervisor.add("crasher", [PY, "-c", "import sys; sys.exit(3)"])
    supervisor.add("steady", [PY, "-c", "import time; time.sleep(60)"])
    steady = supervisor.start("steady")
    supervisor.start("crasher")
    started = time.monotonic()
    try:
        message = _run(supervisor, lambda: False)
    finally:
        supervisor.stop(5)
    elapsed = time.monotonic() - started
    restarts = [line for line in lines if line.startswith("crasher (pid") and "exited with code 3" in line]
    assert [line.split("restarting it in ")[1].split(" ")[0] for line in restarts] == ["0s", "0s", "0s"]
    assert "(exit 1 of at most 3 within 60s)" in restarts[0] and "(exit 3 of at most 3" in restarts[2]
    assert sum("crasher restarted" in line for line in lines) == 3
    assert message.startswith("giving up: crasher (pid ")
    assert "exited with code 3; it exited 4 times within 60s" in message
    assert elapsed >= 0.1 + 0.2 + 0.4  # the backoff doubled, capped at backoff_max_s
    assert steady.poll() is not None and supervisor.children["steady"].restarts == 0  # stop() stopped it


def test_the_dead_childs_group_is_cleared_before_a_restart():
    """A child that holds a port (api, Redis) leaves processes behind when it dies: they get SIGTERM (SIGKILL after
    the grace), and the child is restarted only once they are gone."""
    lines: list[str] = []
    policy = RestartPolicy(max_crashes=5, window_s=60, backoff_initial_s=0.05, backoff_max_s=0.05)
    supervisor = ProcessSupervisor(dict(os.environ), policy, echo=lines.append, group_grace_s=1.0)
    # The grandchild ignores SIGTERM: only the SIGKILL after group_grace_s ends it.
    grandchild = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    script = (
        f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {grandchild!r}]); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    supervisor.add("holder", [PY, "-c", script])
    proc = supervisor.start("holder")
    try:
        wait_for(lambda: len(psutil.Process(proc.pid).children()) == 1, 10, what="the grandchild")
        orphan = psutil.Process(proc.pid).children()[0]
        time.sleep(0.5)  # the grandchild installed its handler
        proc.kill()
        _run(supervisor, lambda: supervisor.children["holder"].restarts == 1)
        assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
        assert any("holder: processes of the exited one" in line and "SIGKILL" in line for line in lines), lines
        assert any("holder (pid" in line and "was killed by SIGKILL: restarting it in 0s" in line for line in lines)
    finally:
        supervisor.stop(5)
    assert supervisor.children["holder"].proc.poll() is not None


def test_a_stale_redis_from_the_pid_file_is_stopped_and_nothing_else(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    redis = EmbeddedRedis(data_dir, free_port())
    # As a `tp up` killed before the death signal existed left it: detached, in its own session.
    stale = subprocess.Popen(redis.argv(), start_new_session=True, stdin=subprocess.DEVNULL)
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], cwd=data_dir)
    try:
        wait_for(redis.ready, 15, what="the stale redis")
        redis.record_pid(other.pid)  # a recycled pid: not a redis-server -> left alone, pid file dropped
        assert stop_stale_redis(redis.pid_file, data_dir) is False
        assert other.poll() is None and not redis.pid_file.exists()

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        redis.record_pid(stale.pid)  # a redis, but not this data directory's
        assert stop_stale_redis(redis.pid_file, elsewhere) is False and stale.poll() is None

        redis.record_pid(stale.pid)
        lines: list[str] = []
        assert stop_stale_redis(redis.pid_file, data_dir, echo=lines.append) is True
        assert stale.wait(timeout=5) == 0  # SIGTERM: it saved its dump and exited cleanly
        assert redis.rdb_file.is_file() and not redis.pid_file.exists()
        assert lines == [
            f"stopping the Redis server a previous `tp up` left running (pid {stale.pid}, from redis.rdb.pid)"
        ]
    finally:
        for proc in (stale, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
