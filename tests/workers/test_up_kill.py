"""kill -9 of each child of `tp up` (real API with two processes, embedded Redis, worker, eval worker, beat): the
platform answers again within 30 s and jobs complete, a job running across its worker's death resumes from its
checkpoint; kill -9 of `tp up` itself leaves nothing behind; a stale Redis from an earlier run is stopped; a child
that keeps crashing makes `tp up` give up with a clear message and exit 1."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from _wk import REPO, wait_for

from training_platform.cli.processes import EmbeddedRedis, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TP = [sys.executable, "-m", "training_platform.cli"]
ANSWER_WITHIN_S = 30


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        TP_DATA_DIR=str(data_dir),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        TP_HEARTBEAT_INTERVAL="1",
        TP_HEARTBEAT_TIMEOUT="6",
        TP_RECOVERY_INTERVAL="2",
        TP_METRICS_BATCH_INTERVAL="0.5",
        TP_MIN_FREE_DISK_MB="1",
        **extra,
    )
    return env


class Up:
    """A `tp up` in its own session, its output in a file."""

    def __init__(self, data_dir: Path, *args: str, **env: str):
        self.port = free_port()
        self.log_file = data_dir.parent / f"{data_dir.name}-up.log"
        with self.log_file.open("wb") as log:
            self.proc = subprocess.Popen(
                [*TP, "up", "--port", str(self.port), "--grace", "20", *args],
                env=_env(data_dir, **env),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        self.base = f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_file.read_text(errors="replace")

    def health(self) -> dict | None:
        try:
            response = httpx.get(f"{self.base}/health", timeout=2)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def child(self, marker: str) -> psutil.Process:
        """The direct child of `tp up` whose command line contains `marker`."""
        for p in psutil.Process(self.proc.pid).children():
            try:
                if marker in " ".join(p.cmdline()):
                    return p
            except psutil.Error:
                continue
        raise AssertionError(f"no child of tp up matches {marker!r}")

    def family(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            with_children = self.family()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            psutil.wait_procs(with_children, timeout=10)


def _kill9(up: Up, name: str, marker: str) -> int:
    """SIGKILL the child `name`; returns the new pid once `tp up` has restarted it."""
    old = up.child(marker)
    old.kill()
    line = re.compile(rf"^{re.escape(name)} \(pid {old.pid}\) was killed by SIGKILL: restarting it in \d+s", re.M)
    wait_for(lambda: line.search(up.output()), 20, what=f"the restart line of {name}")
    restarted = wait_for(
        lambda: (
            re.search(rf"^{re.escape(name)} restarted \(pid (\d+)", up.output(), re.M)
            and [int(m) for m in re.findall(rf"^{re.escape(name)} restarted \(pid (\d+)", up.output(), re.M)]
        ),
        30,
        what=f"{name} restarted",
    )
    return restarted[-1]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _api_processes(uvicorn: psutil.Process) -> list[psutil.Process]:
    """uvicorn's worker processes (multiprocessing spawn; not its resource tracker)."""
    return [p for p in uvicorn.children() if _alive(p) and "spawn_main" in " ".join(_cmdline(p))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # exited meanwhile (or a zombie)
        return []


def _sft(max_steps: int, save_steps: int) -> dict:
    from training_platform.training.config import load_yaml

    config = load_yaml(str(REPO / "configs/examples/sft_tiny.yaml"))
    config["training"].update(
        max_steps=max_steps, logging_steps=1, save_steps=save_steps, eval_steps=10_000, per_device_batch_size=8
    )
    return config


def _finished(client: httpx.Client, job_id: int, timeout: float) -> dict:
    def done():
        job = client.get(f"/jobs/{job_id}").json()
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(done, timeout, interval=0.5, what=f"job {job_id} to finish")
    assert job["status"] == "succeeded", job
    return job


def test_kill_9_of_each_child_and_of_tp_up(tmp_path, demo_assets):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copytree(demo_assets, data_dir / "demo")  # a copy: jobs may only read inside the data dir
    # A Redis an earlier `tp up` left running (detached, as the embedded Redis used to be): stopped at start.
    stale_redis = EmbeddedRedis(data_dir, free_port())
    stale = subprocess.Popen(stale_redis.argv(), start_new_session=True, stdin=subprocess.DEVNULL)
    stale_redis.record_pid(stale.pid)
    wait_for(stale_redis.ready, 15, what="the stale redis")

    up = Up(data_dir, "--api-workers", "2")
    t0 = time.monotonic()
    try:
        wait_for(lambda: up.health() or up.proc.poll() is not None, 180, interval=0.5, what="/health")
        assert up.proc.poll() is None, up.output()[-3000:]
        print(f"\n[tp up] answered after {time.monotonic() - t0:.1f}s")
        assert stale.wait(timeout=5) == 0, "the stale redis was not stopped"
        assert f"stopping the Redis server a previous `tp up` left running (pid {stale.pid}" in up.output()
        redis_url = re.search(r"embedded Redis: (redis://127\.0\.0\.1:(\d+)/0)", up.output())
        assert redis_url and (data_dir / "redis.rdb.pid").read_text().strip() == str(up.child("redis-server").pid)
        token = (data_dir / "admin.token").read_text().strip()
        client = httpx.Client(base_url=f"{up.base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert len(_api_processes(up.child("api.serve"))) == 2, "two API processes"

        # beat: restarted (the recovery sweep that the worker kill below needs runs in it).
        _kill9(up, "beat", "--beat")

        # worker, with a job running: its training process checkpoints on the death signal, the job goes stale,
        # the restarted beat requeues it and the restarted worker resumes it from the checkpoint.
        response = client.post("/jobs", json={"name": "across a worker kill", "config": _sft(30, 5)})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        wait_for(lambda: client.get(f"/jobs/{job_id}/checkpoints").json(), 120, interval=0.5, what="a first checkpoint")
        _kill9(up, "worker", "-Q train,data")
        job = _finished(client, job_id, 180)
        events = [e["reason"] for e in client.get(f"/jobs/{job_id}/events").json()]
        assert any("worker lost" in reason for reason in events), events
        assert job["current_step"] == 30
        series = client.get(f"/jobs/{job_id}/metrics").json()["series"]
        print(f"[worker kill] job {job_id}: {events}")
        for name, points in series.items():
            steps = [step for step, _ in points]
            assert steps == sorted(set(steps)), f"{name}: a step recorded twice"
        assert max(len(points) for points in series.values()) == 30, "0 steps lost (logging_steps: 1)"

        # api: the uvicorn supervisor dies; its worker processes go with their group, then a new api serves.
        old_api = _api_processes(up.child("api.serve"))
        t_kill = time.monotonic()
        _kill9(up, "api", "api.serve")
        wait_for(up.health, ANSWER_WITHIN_S, interval=0.2, what="/health after the api kill")
        print(f"[api kill] answering again after {time.monotonic() - t_kill:.1f}s")
        assert not [p for p in old_api if _alive(p)], "the killed api's processes are gone"
        # One of uvicorn's API processes: uvicorn replaces it itself.
        victim = _api_processes(up.child("api.serve"))[0]
        victim.kill()
        wait_for(
            lambda: (
                len(_api_processes(up.child("api.serve"))) == 2 and victim not in _api_processes(up.child("api.serve"))
            ),
            ANSWER_WITHIN_S,
            what="uvicorn to replace its process",
        )
        assert up.health()

        # embedded Redis: back on the same port; workers and API reconnect. The eval worker too is killed: jobs of
        # both kinds submitted afterwards complete (a training job and an evaluation, run side by side).
        t_kill = time.monotonic()
        _kill9(up, "redis", "redis-server")
        assert up.child("redis-server").cmdline()[0].endswith(f"127.0.0.1:{redis_url.group(2)}")
        wait_for(lambda: (up.health() or {}).get("broker") == "ok", ANSWER_WITHIN_S, what="the broker again")
        print(f"[redis kill] broker ok after {time.monotonic() - t_kill:.1f}s")
        _kill9(up, "eval-worker", "-Q eval")
        training = client.post("/jobs", json={"name": "after the redis kill", "config": _sft(4, 100)})
        assert training.status_code == 201 and training.json()["warning"] is None, training.text
        evaluation = client.post(
            "/evaluations",
            json={
                "model": "demo-tiny",
                "benchmarks": [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 2}],
                "generation": {"max_new_tokens": 2},
                "backend": {"num_threads": 1},
            },
        )
        assert evaluation.status_code == 201, evaluation.text
        _finished(client, training.json()["id"], 120)
        _finished(client, evaluation.json()["id"], 120)
        print(
            f"[redis + eval-worker kill] a new job and an evaluation finished {time.monotonic() - t_kill:.1f}s "
            f"after the kills"
        )
        client.close()

        # tp up itself: every child (the embedded Redis included) is gone within a few seconds.
        family = up.family()
        assert len(family) >= 5
        t_kill = time.monotonic()
        up.proc.kill()
        up.proc.wait()
        gone, alive = psutil.wait_procs(family, timeout=20)
        alive = [p for p in alive if _alive(p)]
        assert not alive, f"orphans of tp up: {[(p.pid, p.cmdline()) for p in alive]}"
        print(f"[tp up kill] all {len(family)} processes gone after {time.monotonic() - t_kill:.1f}s")
        assert not stale_redis.ready()
    finally:
        up.cleanup()
        if stale.poll() is None:
            stale.kill()
        print(f"[total] {time.monotonic() - t0:.1f}s")


CRASHING_APP = "raise SystemExit('this API cannot start')\n"


def test_a_child_that_keeps_crashing_makes_tp_up_give_up(tmp_path, demo_assets):
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "crashing_api.py").write_text(CRASHING_APP)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "demo").symlink_to(demo_assets)
    # One API process: with several, uvicorn's own supervisor replaces a worker that fails (forever) and stays up.
    up = Up(
        data_dir,
        "--app",
        "crashing_api:app",
        "--api-workers",
        "1",
        PYTHONPATH=f"{tmp_path / 'stub'}:{REPO}",
        TP_UP_MAX_CRASHES="3",
        TP_UP_BACKOFF_MAX="0.5",
    )
    try:
        family: list[psutil.Process] = []

        def exited():
            if up.proc.poll() is None:
                family.extend(p for p in up.family() if p not in family)
            return up.proc.poll() is not None

        wait_for(exited, 120, interval=0.2, what="tp up to give up")
        output = up.output()
        assert up.proc.returncode == 1, output[-3000:]
        assert len(re.findall(r"^api \(pid \d+\) exited with code 1: restarting it in", output, re.M)) == 2
        assert re.search(
            r"^giving up: api \(pid \d+\) exited with code 1; it exited 3 times within 300s "
            r"\(TP_UP_MAX_CRASHES=3",
            output,
            re.M,
        ), output[-3000:]
        assert output.rstrip().endswith("stopped")
        _, alive = psutil.wait_procs(family, timeout=10)
        assert not [p for p in alive if _alive(p)]
    finally:
        up.cleanup()
