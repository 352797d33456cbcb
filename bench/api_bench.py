"""How fast is the platform's API on the real topology? `tp api` + one `tp worker` + `tp beat` as separate processes,
on PostgreSQL (default) or the embedded SQLite, with a real Redis broker.

Measured:
  a. submit -> running: wall time from sending `POST /api/v1/jobs` until `GET /api/v1/jobs/{id}` (polled every
     ~20 ms) shows `running` (the wake-up message, the claim, the preflight gate, the run directory). Jobs go one at
     a time: each is cancelled once running and the next is submitted only after it has ended, so every job starts
     on an idle worker. The tiny SFT example config with a small max_steps. One warm-up job goes first and is not
     counted: a worker's first job waits for the pool process's background import of torch/transformers.
  b. `GET /jobs/{id}/metrics?names=loss&max_points=1000` on a job with 1,000,000 stored loss points (bulk-inserted
     straight into metric_points: COPY on PostgreSQL, chunked executemany on SQLite); the response must be
     downsampled to <= max_points + 2 points.
  c. `GET /api/v1/jobs` (default page size) under 50 concurrent clients (one httpx.AsyncClient, 50 tasks) for ~15 s
     with 200 jobs in the database: requests/s and latency percentiles.

Set-up, all isolated and removed at the end: a temporary TP_DATA_DIR, a fresh PostgreSQL database `tp_bench_<hex>`
(dropped at the end; `--db sqlite` uses the embedded default `$TP_DATA_DIR/platform.db`), Redis db 13 (flushed
before and after), `tp db upgrade`, `tp demo prepare`, `tp users create bench --admin`, then the three services as
process groups (SIGTERM, then SIGKILL after a grace period).

The bench client runs on the same machine as everything else (2 cores here), so (c) measures the whole box: the
client's own CPU use competes with uvicorn and the database. Load averages at the start and end are recorded.

    .venv/bin/python bench/api_bench.py                    # PostgreSQL, 20 jobs, 1M points, 15 s of load
    .venv/bin/python bench/api_bench.py --db sqlite
    .venv/bin/python bench/api_bench.py --jobs 5 --points 100000 --duration 5 --keep   # quick look, keep the dir
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    CONFIGS,
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    fmt,
    print_table,
    seed_demo,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

API = "/api/v1"
PG_ADMIN_DSN = os.environ.get("TP_BENCH_PG_ADMIN_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres")
PG_URL = os.environ.get("TP_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/{name}")
REDIS_URL = os.environ.get("TP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
POLL_S = 0.02


# ---------------------------------------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    ms = [s * 1000.0 for s in seconds]

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    return {
        "n": len(ms),
        "p50_ms": r(percentile(ms, 50)),
        "p95_ms": r(percentile(ms, 95)),
        "p99_ms": r(percentile(ms, 99)),
        "min_ms": r(min(ms) if ms else None),
        "max_ms": r(max(ms) if ms else None),
    }


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------- services


class Service:
    """A process in its own process group, output to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.log_file = log_dir / f"{name}.log"
        self._log = self.log_file.open("ab")
        self.popen = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_log(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.log():
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{tail(self.log_file, 30)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{tail(self.log_file, 30)}")
            time.sleep(0.2)

    def stop(self, grace_s: float = 30.0) -> None:
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(self.popen.pid):
                self.popen.poll()
                time.sleep(0.2)
            if not _group_alive(self.popen.pid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


@contextlib.contextmanager
def bench_database(kind: str, data_dir: Path):
    """Yields the DATABASE_URL (None: the embedded SQLite default under TP_DATA_DIR)."""
    if kind == "sqlite":
        yield None
        return
    import psycopg

    name = f"tp_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_URL.format(name=name)
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Topology:
    data_dir: Path
    db_url: str
    env: dict[str, str]
    base_url: str = ""
    token: str = ""
    services: list[Service] = field(default_factory=list)

    def tp(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run([*tp_command(), *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"tp {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def start(self, name: str, *args: str) -> Service:
        return self.start_argv(name, [*tp_command(), *args])

    def start_argv(self, name: str, argv: list[str]) -> Service:
        service = Service(name, argv, self.env, self.data_dir)
        self.services.append(service)
        return service

    def check_alive(self) -> None:
        for service in self.services:
            if not service.alive():
                raise RuntimeError(
                    f"{service.name} exited with {service.popen.returncode}:\n{tail(service.log_file, 30)}"
                )

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.services.clear()


def api_argv(port: int, workers: int, plain_uvicorn: bool = False) -> list[str]:
    """`workers` API processes: `python -m training_platform.api.serve` (uvicorn on a TCP_NODELAY socket), or the
    plain `uvicorn --workers` command, whose own socket adds the client's 40 ms delayed ACK to every kept-alive
    response when there is more than one worker (see training_platform/api/serve.py)."""
    if plain_uvicorn:
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "training_platform.api.app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        return argv + (["--workers", str(workers)] if workers > 1 else [])
    return [
        sys.executable,
        "-m",
        "training_platform.api.serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def setup_topology(topo: Topology, api_workers: int = 1, plain_uvicorn: bool = False) -> dict[str, float]:
    """Migrate, demo assets, admin user, then api (`api_workers` processes) + worker + beat. Returns the set-up
    timings."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    topo.tp("db", "upgrade")
    timings["db_upgrade_s"] = time.perf_counter() - t
    t = time.perf_counter()
    seed_demo(topo.data_dir)
    topo.tp("demo", "prepare")
    timings["demo_prepare_s"] = time.perf_counter() - t
    topo.token = topo.tp("users", "create", "bench", "--admin").stdout.strip().splitlines()[-1]

    port = free_port()
    topo.base_url = f"http://127.0.0.1:{port}"
    t = time.perf_counter()
    api = topo.start_argv("api", api_argv(port, api_workers, plain_uvicorn))
    worker = topo.start("worker", "worker", "--queues", "train", "--name", "bench-train@%h")
    beat = topo.start("beat", "beat")
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"{topo.base_url}/health", timeout=2)
            if r.status_code == 200 and r.json().get("broker") == "ok":
                break
        if not api.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the API did not become healthy:\n{tail(api.log_file, 30)}")
        time.sleep(0.2)
    worker.wait_log(" ready.", 120)
    beat.wait_log(" ready.", 120)
    timings["services_ready_s"] = time.perf_counter() - t
    return timings


# ---------------------------------------------------------------------------------------------- the job config


def job_config(max_steps: int) -> dict[str, Any]:
    cfg = yaml.safe_load((CONFIGS / "sft_tiny.yaml").read_text())
    cfg["training"].update(max_steps=max_steps, logging_steps=1, save_steps=max_steps, eval_steps=max_steps)
    return cfg


TERMINAL = {"succeeded", "failed", "cancelled"}


def wait_terminal(client: httpx.Client, job_id: int, topo: Topology, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"{API}/jobs/{job_id}").raise_for_status().json()
        if job["status"] in TERMINAL:
            return job
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"job {job_id} still {job['status']} after {timeout:.0f}s\n{tail(topo.data_dir / 'worker.log', 40)}"
            )
        topo.check_alive()
        time.sleep(0.2)


def _ts(value: str | None) -> float | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


# ---------------------------------------------------------------------------------------------- a. submit -> running


def submit_until_running(topo: Topology, client: httpx.Client, name: str, config: dict) -> dict[str, Any]:
    """POST one job, poll it until `running`, cancel it and wait until it has ended. Returns its timings."""
    t0 = time.perf_counter()
    r = client.post(f"{API}/jobs", json={"name": name, "config": config, "priority": 0})
    if r.status_code != 201:
        raise RuntimeError(f"POST /jobs -> {r.status_code}: {r.text[:2000]}")
    job = r.json()
    if job.get("warning"):
        raise RuntimeError(f"job {job['id']}: {job['warning']}")
    job_id, n_polls = job["id"], 0
    deadline = time.monotonic() + 180
    while job["status"] != "running":
        if job["status"] in TERMINAL:
            raise RuntimeError(f"job {job_id} ended as {job['status']} before running: {job.get('error')}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"job {job_id} still {job['status']} after 180 s\n{tail(topo.data_dir / 'worker.log', 40)}"
            )
        time.sleep(POLL_S)
        job = client.get(f"{API}/jobs/{job_id}").raise_for_status().json()
        n_polls += 1
    client_s = time.perf_counter() - t0
    server_s = _ts(job["started_at"]) - _ts(job["created_at"]) if job.get("started_at") else None
    cancel = client.post(f"{API}/jobs/{job_id}/cancel")
    if cancel.status_code not in (200, 409):  # 409: it already finished
        raise RuntimeError(f"cancel {job_id} -> {cancel.status_code}: {cancel.text[:500]}")
    end = wait_terminal(client, job_id, topo)
    server_ms = fmt(server_s * 1000 if server_s is not None else None, ".0f")
    print(
        f"  job {job_id} ({name}): running after {client_s * 1000:.0f} ms (server {server_ms} ms, {n_polls} polls),"
        f" ended {end['status']}",
        flush=True,
    )
    return {"job_id": job_id, "client_s": client_s, "server_s": server_s, "polls": n_polls, "end": end["status"]}


def bench_submit_to_running(
    topo: Topology, client: httpx.Client, n_jobs: int, max_steps: int, warmup_jobs: int
) -> dict[str, Any]:
    """`warmup_jobs` first (not in the statistics): a worker's pool process imports torch/transformers in the
    background when it starts and its first job waits for that, so a job submitted right after the worker reported
    ready measures the worker's start-up, not the API."""
    config = job_config(max_steps)
    cold = [submit_until_running(topo, client, f"bench-warmup-{i}", config) for i in range(warmup_jobs)]
    runs = [submit_until_running(topo, client, f"bench-latency-{i}", config) for i in range(n_jobs)]
    ends: dict[str, int] = {}
    for run in runs:
        ends[run["end"]] = ends.get(run["end"], 0) + 1
    return {
        "jobs": n_jobs,
        "max_steps": max_steps,
        "poll_interval_ms": POLL_S * 1000,
        "client_submit_to_running": summary_ms([r["client_s"] for r in runs]),
        "server_created_to_started": summary_ms([r["server_s"] for r in runs if r["server_s"] is not None]),
        "polls_median": percentile([r["polls"] for r in runs], 50),
        "end_states": ends,
        "raw_client_ms": [round(r["client_s"] * 1000, 1) for r in runs],
        "warmup_jobs_client_ms": [round(r["client_s"] * 1000, 1) for r in cold],
    }


# ---------------------------------------------------------------------------------------------- b. metrics


def insert_points(topo: Topology, job_id: int, n_points: int) -> float:
    """`n_points` loss points (steps 1..n, a noisy decaying curve with a few spikes), straight into the table."""
    import random

    rng = random.Random(0)
    ts = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def value(step: int) -> float:
        v = 2.0 * math.exp(-step / (n_points / 5)) + 0.1 + rng.random() * 0.05
        return v * 5 if step % 99_991 == 0 else v

    t = time.perf_counter()
    if topo.db_url.startswith("postgresql"):
        import psycopg

        dsn = topo.db_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn) as conn:
            with conn.cursor() as cur, cur.copy("COPY metric_points (job_id, name, step, value, ts) FROM STDIN") as cp:
                for step in range(1, n_points + 1):
                    cp.write_row((job_id, "loss", step, value(step), ts))
            conn.execute("ANALYZE metric_points")
    else:
        from sqlalchemy import insert

        from training_platform.db.models import MetricPoint
        from training_platform.db.session import make_engine

        engine = make_engine(topo.db_url)
        try:
            chunk = 50_000
            with engine.begin() as conn:
                for start in range(1, n_points + 1, chunk):
                    rows = [
                        {"job_id": job_id, "name": "loss", "step": s, "value": value(s), "ts": ts}
                        for s in range(start, min(start + chunk, n_points + 1))
                    ]
                    conn.execute(insert(MetricPoint.__table__), rows)
            with engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        finally:
            engine.dispose()
    return time.perf_counter() - t


def bench_metrics(topo: Topology, client: httpx.Client, n_points: int, n_requests: int) -> dict[str, Any]:
    # The job row through the API; cancelled (or ended) before the points go in, so no worker touches its metrics.
    r = client.post(f"{API}/jobs", json={"name": "bench-metrics", "config": job_config(5), "priority": 0})
    r.raise_for_status()
    job_id = r.json()["id"]
    cancel = client.post(f"{API}/jobs/{job_id}/cancel")
    if cancel.status_code not in (200, 409):
        raise RuntimeError(f"cancel {job_id} -> {cancel.status_code}: {cancel.text[:500]}")
    end = wait_terminal(client, job_id, topo)
    # A job that got to run has its own few real points: clear them so the series is exactly n_points long.
    _delete_points(topo, job_id)
    insert_s = insert_points(topo, job_id, n_points)
    rollup_s = rebuild_rollups(topo, job_id)
    print(
        f"  job {job_id} ({end['status']}): {n_points:,} points inserted in {insert_s:.1f} s, rollups built in "
        f"{rollup_s:.1f} s",
        flush=True,
    )

    url = f"{API}/jobs/{job_id}/metrics"
    params = {"names": "loss", "max_points": 1000}
    first = client.get(url, params=params).raise_for_status().json()  # warm-up (connection, plans, page cache)
    times: list[float] = []
    sizes: list[int] = []
    for _ in range(n_requests):
        t = time.perf_counter()
        r = client.get(url, params=params)
        times.append(time.perf_counter() - t)
        r.raise_for_status()
        sizes.append(len(r.json()["series"]["loss"]))
    loss = first["series"]["loss"]
    assert max(sizes) <= 1002, f"downsampled series too long: {max(sizes)}"
    assert loss[0][0] == 1 and loss[-1][0] == n_points, (loss[0], loss[-1])
    return {
        "job_id": job_id,
        "points_stored": n_points,
        "insert_s": round(insert_s, 2),
        "rollup_rebuild_s": round(rollup_s, 2),
        "requests": n_requests,
        "points_returned": max(sizes),
        "downsampled": first["downsampled"]["loss"],
        "latency": summary_ms(times),
    }


def rebuild_rollups(topo: Topology, job_id: int) -> float:
    """The bulk load bypassed crud (which maintains the rollup tiers with the points): build them as a whole."""
    from sqlalchemy import text
    from sqlmodel import Session

    from training_platform.db import rollups
    from training_platform.db.session import make_engine

    engine = make_engine(topo.db_url)
    t = time.perf_counter()
    try:
        with Session(engine) as session:
            rollups.rebuild(session, job_id)
            session.commit()
        elapsed = time.perf_counter() - t
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    finally:
        engine.dispose()
    return elapsed


def _delete_points(topo: Topology, job_id: int) -> None:
    from sqlalchemy import text

    from training_platform.db.session import make_engine

    engine = make_engine(topo.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM metric_points WHERE job_id = :j"), {"j": job_id})
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------- c. list under load


def fill_jobs(topo: Topology, total: int) -> int:
    """Top the jobs table up to `total` rows (finished jobs, inserted directly: no worker wakes up)."""
    from sqlalchemy import func
    from sqlmodel import Session, select

    from training_platform.db import crud
    from training_platform.db.models import Job, JobStatus, User
    from training_platform.db.session import make_engine
    from training_platform.services.jobs import transition

    engine = make_engine(topo.db_url)
    try:
        with Session(engine) as session:
            have = session.exec(select(func.count()).select_from(Job)).one()
            owner = session.exec(select(User).where(User.name == "bench")).one()
            config = job_config(20)
            for i in range(max(0, total - have)):
                job = crud.create_job(session, owner=owner, name=f"bench-list-{i}", config=config, priority=i % 5)
                transition(session, job, JobStatus.cancelled, reason="bench filler")
            session.commit()
            return session.exec(select(func.count()).select_from(Job)).one()
    finally:
        engine.dispose()


async def _load(base_url: str, token: str, concurrency: int, duration_s: float, warmup_s: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    page_sizes: set[int] = set()
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=60) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        measure_from, stop_at = start + warmup_s, start + warmup_s + duration_s

        async def one_client() -> None:
            while True:
                t = loop.time()
                if t >= stop_at:
                    return
                try:
                    r = await client.get(f"{API}/jobs")
                    ok = r.status_code == 200
                    if ok and len(page_sizes) < 3:
                        page_sizes.add(len(r.json()["items"]))
                    key = None if ok else f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                end = loop.time()
                if t >= measure_from and end <= stop_at:
                    if key is None:
                        latencies.append(end - t)
                    else:
                        errors[key] = errors.get(key, 0) + 1

        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return {"latencies": latencies, "errors": errors, "page_sizes": sorted(page_sizes)}


# wrk prints its own percentiles (microseconds) as one JSON line from this script's `done` hook.
WRK_SCRIPT = """
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TP_BENCH_TOKEN")
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests": %d, "duration_us": %d, "p50": %d, "p95": %d, "p99": %d, ' ..
    '"max": %d, "connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}\\n', summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


def _wrk_load(base_url: str, token: str, concurrency: int, duration_s: float, script: Path) -> dict[str, Any]:
    """One wrk run (one thread: the client's CPU stays small next to the API's): its own latency percentiles."""
    proc = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{duration_s:g}s",
            "--timeout",
            "60s",
            "-s",
            str(script),
            f"{base_url}{API}/jobs",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TP_BENCH_TOKEN": token},
        timeout=duration_s + 120,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("WRK_JSON "))
    return json.loads(line[len("WRK_JSON ") :])


# The API's access log: handling time, then (reads admitted through TP_API_CONCURRENCY) the admission wait.
ACCESS_LINE = re.compile(r"access: GET /api/v1/jobs 200 ([0-9.]+)ms(?: \+([0-9.]+)ms queued)?")


def _cpu_s(pid: int) -> float | None:
    """CPU seconds of a process and its live children (uvicorn's worker processes)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        total = 0.0
        for p in (proc, *proc.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                times = p.cpu_times()
                total += times.user + times.system
        return total
    except Exception:  # noqa: BLE001 - reported as unknown
        return None


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children (wrk)."""
    usage = os.times()
    return usage.children_user + usage.children_system


def _jobs_histogram(topo: Topology) -> dict[float, float]:
    """Cumulative bucket counts of tp_http_request_duration_seconds for GET /api/v1/jobs from /metrics (summed over
    every API process by prometheus_client's multiprocess mode)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{topo.base_url}/metrics", timeout=30).raise_for_status().text
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "tp_http_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_bucket")
                and labels.get("route") == "/api/v1/jobs"
                and labels.get("method") == "GET"
            ):
                out[float(labels["le"])] = sample.value
    return out


def bench_list(
    topo: Topology, total_jobs: int, concurrency: int, duration_s: float, client: str = "httpx", warmup_s: float = 2.0
) -> dict[str, Any]:
    n_jobs = fill_jobs(topo, total_jobs)
    api = next(s for s in topo.services if s.name == "api")
    if client == "wrk":
        script = topo.data_dir / "bench_wrk.lua"
        script.write_text(WRK_SCRIPT)
        _wrk_load(topo.base_url, topo.token, concurrency, warmup_s, script)  # warm-up, not counted
    hist0 = _jobs_histogram(topo)
    log_offset = api.log_file.stat().st_size
    api_cpu0, wall0 = _cpu_s(api.popen.pid), time.perf_counter()
    if client == "wrk":
        wrk_cpu0 = _children_cpu_s()
        w = _wrk_load(topo.base_url, topo.token, concurrency, duration_s, script)
        client_cpu = _children_cpu_s() - wrk_cpu0
        result = {
            "errors": {k: w[k] for k in ("connect", "read", "write", "status", "timeout") if w[k]},
            "page_sizes": None,
            "n": w["requests"],
        }
        client_latency = {
            "n": w["requests"],
            **{f"{q}_ms": round(w[q] / 1000, 1) for q in ("p50", "p95", "p99")},
            "max_ms": round(w["max"] / 1000, 1),
        }
        duration_s = w["duration_us"] / 1e6
    else:
        client_cpu0 = time.process_time()
        result = asyncio.run(_load(topo.base_url, topo.token, concurrency, duration_s, warmup_s=warmup_s))
        client_cpu = time.process_time() - client_cpu0
        result["n"] = len(result["latencies"])
        client_latency = summary_ms(result["latencies"])
    api_cpu1, wall = _cpu_s(api.popen.pid), time.perf_counter() - wall0
    # The API's own view (its access log: time inside the app, from the request to the response), over the whole
    # load including the warm-up: the gap to the client's latency is queueing (event loop, thread pool, CPU).
    time.sleep(0.5)
    with api.log_file.open(errors="replace") as f:
        f.seek(log_offset)
        matches = list(ACCESS_LINE.finditer(f.read()))
    server_ms = [float(m[1]) / 1000.0 for m in matches]
    hist1 = _jobs_histogram(topo)
    counted = hist1.get(math.inf, 0) - hist0.get(math.inf, 0)
    histogram: dict[str, Any] = {"requests": counted}
    for le in (0.025, 0.05, 0.1):
        if counted and le in hist1:
            histogram[f"share_le_{int(le * 1000)}ms"] = round((hist1[le] - hist0.get(le, 0)) / counted, 4)
    with_queue_ms = [(float(m[1]) + float(m[2] or 0)) / 1000.0 for m in matches]
    cpu = {
        "wall_s": round(wall, 2),
        "client_cpu_s": round(client_cpu, 2),
        "api_cpu_s": round(api_cpu1 - api_cpu0, 2) if api_cpu0 is not None and api_cpu1 is not None else None,
    }
    return {
        "client": client,
        "jobs_in_db": n_jobs,
        "concurrency": concurrency,
        "duration_s": round(duration_s, 2),
        "ok_requests": result["n"],
        "errors": result["errors"],
        "items_per_page": result["page_sizes"],
        "requests_per_s": round(result["n"] / duration_s, 2),
        "latency": client_latency,
        "server_side_latency": summary_ms(server_ms),
        "server_side_with_admission": summary_ms(with_queue_ms),
        "prometheus_histogram": histogram,
        "cpu": cpu,
    }


# ---------------------------------------------------------------------------------------------- main


def machine_info(db_url: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(Exception):
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    if db_url.startswith("postgresql"):
        with contextlib.suppress(Exception):
            import psycopg

            with psycopg.connect(PG_ADMIN_DSN) as conn:
                info["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
    else:
        import sqlite3

        info["sqlite"] = sqlite3.sqlite_version
    with contextlib.suppress(Exception):
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        info["redis"] = client.info("server")["redis_version"]
        client.close()
    return info


def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="tp_api_bench_"))
    data_dir = base / "data"
    data_dir.mkdir()
    # Crud in this process (bulk loads, filler jobs) records Prometheus metrics too: into the services' directory.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(data_dir / "prometheus")
    load_start = loadavg()
    print(f"api_bench: db={args.db}, data dir {data_dir}, load average at start {load_start}", flush=True)
    flush_redis(REDIS_URL)
    try:
        with bench_database(args.db, data_dir) as db_url:
            env = {k: v for k, v in bench_env(data_dir).items() if k not in ("DATABASE_URL", "TP_MODEL_ROOTS")}
            env.update(REDIS_URL=REDIS_URL, TP_AUTH_MODE="token")
            if db_url:
                env["DATABASE_URL"] = db_url
            effective_url = db_url or f"sqlite:///{data_dir / 'platform.db'}"
            topo = Topology(data_dir=data_dir, db_url=effective_url, env=env)
            info = machine_info(effective_url)
            try:
                setup = setup_topology(topo, args.api_workers, args.plain_uvicorn)
                print(f"  topology up: {json.dumps({k: round(v, 1) for k, v in setup.items()})}", flush=True)
                headers = {"Authorization": f"Bearer {topo.token}"}
                with httpx.Client(base_url=topo.base_url, headers=headers, timeout=60) as client:
                    a = None
                    if args.jobs:
                        print(
                            f"a. submit -> running, {args.warmup_jobs} warm-up + {args.jobs} jobs one at a time",
                            flush=True,
                        )
                        a = bench_submit_to_running(topo, client, args.jobs, args.max_steps, args.warmup_jobs)
                    print(
                        f"b. metrics of a job with {args.points:,} points, {args.metric_requests} requests", flush=True
                    )
                    b = bench_metrics(topo, client, args.points, args.metric_requests)
                print(f"c. GET /jobs with {args.concurrency} concurrent clients for {args.duration:.0f} s", flush=True)
                c = bench_list(topo, args.list_jobs, args.concurrency, args.duration, args.client, args.warmup)
                topo.check_alive()
            except BaseException:
                for service in topo.services:
                    print(f"--- {service.name}.log\n{tail(service.log_file, 25)}", file=sys.stderr)
                raise
            finally:
                topo.stop()
    finally:
        with contextlib.suppress(Exception):
            flush_redis(REDIS_URL)
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    info["load_avg_start"], info["load_avg_end"] = load_start, loadavg()
    info["api_workers"] = args.api_workers
    info["api_runner"] = "uvicorn --workers" if args.plain_uvicorn else "training_platform.api.serve"
    return {
        "bench": "api_bench",
        "db": args.db,
        "machine": info,
        "setup": {k: round(v, 2) for k, v in setup.items()},
        "submit_to_running": a,
        "metrics": b,
        "list_jobs": c,
    }


def report(result: dict[str, Any]) -> None:
    m, a, b, c = result["machine"], result["submit_to_running"], result["metrics"], result["list_jobs"]
    print()
    print(
        f"API bench ({result['db']}) - {m['date']} - {m['cpu_count']} cores, {m.get('memory_gb')} GB, "
        f"{m['platform']}, python {m['python']}, "
        + (f"PostgreSQL {m.get('postgresql')}" if result["db"] == "postgres" else f"SQLite {m.get('sqlite')}")
        + f", Redis {m.get('redis')}"
    )
    print(
        f"load average (1/5/15 min): start {m['load_avg_start']}, end {m['load_avg_end']}; "
        f"{m.get('api_workers', 1)} API process(es), {m.get('api_runner', 'uvicorn')}"
    )
    print()

    def row(what: str, n: str, s: dict[str, Any], extra: str = "") -> list[str]:
        return [
            what,
            n,
            fmt(s["p50_ms"], ".1f"),
            fmt(s["p95_ms"], ".1f"),
            fmt(s["p99_ms"], ".1f"),
            fmt(s["max_ms"], ".1f"),
            extra,
        ]

    rows = (
        []
        if a is None
        else [
            row(
                "a. POST /jobs -> running (client, 20 ms polls)",
                str(a["jobs"]),
                a["client_submit_to_running"],
                f"ends: {a['end_states']}; warm-up job(s): "
                f"{', '.join(f'{x:.0f}' for x in a['warmup_jobs_client_ms'])} ms",
            ),
            row("a. created_at -> started_at (server clock)", str(a["jobs"]), a["server_created_to_started"]),
        ]
    )
    rows += [
        row(
            f"b. GET metrics, {b['points_stored']:,} pts, max_points=1000",
            str(b["requests"]),
            b["latency"],
            f"{b['points_returned']} points returned",
        ),
        row(
            f"c. GET /jobs, {c['concurrency']} clients ({c.get('client', 'httpx')}), {c['jobs_in_db']} jobs",
            str(c["ok_requests"]),
            c["latency"],
            f"{c['requests_per_s']:.1f} req/s, errors {c['errors'] or 0}",
        ),
        row(
            "c. same, inside the API + admission wait",
            str(c["server_side_with_admission"]["n"]),
            c["server_side_with_admission"],
        ),
        row(
            "c. same, time inside the API (access log)",
            str(c["server_side_latency"]["n"]),
            c["server_side_latency"],
            f"CPU s in {c['cpu']['wall_s']} s: api {fmt(c['cpu']['api_cpu_s'], '.1f')}, "
            f"client {fmt(c['cpu']['client_cpu_s'], '.1f')}",
        ),
        [
            "c. same, /metrics histogram: share <= 25 / 50 / 100 ms",
            str(c["prometheus_histogram"].get("requests")),
            "",
            "",
            "",
            "",
            " / ".join(str(c["prometheus_histogram"].get(f"share_le_{ms}ms")) for ms in (25, 50, 100)),
        ],
    ]
    print_table(["measurement", "n", "p50 ms", "p95 ms", "p99 ms", "max ms", "notes"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--jobs", type=int, default=20, help="a: jobs submitted one at a time (0: skip a)")
    parser.add_argument(
        "--api-workers", type=int, default=os.cpu_count() or 1, help="API processes (default: the number of cores)"
    )
    parser.add_argument(
        "--plain-uvicorn",
        action="store_true",
        help="run the API with `uvicorn --workers` instead of training_platform.api.serve",
    )
    parser.add_argument(
        "--warmup-jobs",
        type=int,
        default=1,
        help="a: jobs run first and not counted (the worker's first job waits for its start-up imports)",
    )
    parser.add_argument("--max-steps", type=int, default=20, help="a: training.max_steps of each job")
    parser.add_argument("--points", type=int, default=1_000_000, help="b: stored loss points")
    parser.add_argument("--metric-requests", type=int, default=50, help="b: requests measured")
    parser.add_argument("--list-jobs", type=int, default=200, help="c: jobs in the database")
    parser.add_argument("--concurrency", type=int, default=50, help="c: concurrent clients")
    parser.add_argument("--duration", type=float, default=15.0, help="c: seconds measured (after --warmup)")
    parser.add_argument("--warmup", type=float, default=2.0, help="c: seconds of load before measuring")
    parser.add_argument(
        "--client",
        choices=("wrk", "httpx"),
        default="wrk" if shutil.which("wrk") else "httpx",
        help="c: the load generator (default wrk when installed: apt-get install wrk; the httpx "
        "client burns most of a core itself on this 2-core machine)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="JSON result (default bench/results/api_bench[_sqlite].json)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dir (service logs)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": 1 API process, a: 1 job of 2 steps, b: 2,000 points, c: 2 clients for 1 s (httpx)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.api_workers, args.jobs, args.warmup_jobs, args.max_steps = 1, 1, 0, 2
        args.points, args.metric_requests = 2_000, 2
        args.list_jobs, args.concurrency, args.duration, args.warmup, args.client = 60, 2, 1.0, 0.2, "httpx"
    result = run(args)
    report(result)
    default = RESULTS_DIR / ("api_bench.json" if args.db == "postgres" else "api_bench_sqlite.json")
    out = smoke_report(f"api_bench_{args.db}", args.output) if args.smoke else args.output or default
    write_json(out, result)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
