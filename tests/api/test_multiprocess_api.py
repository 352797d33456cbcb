"""The API as several processes (uvicorn --workers 2) on one database: any process answers for any job, and
/metrics, answered by either process, counts the requests of both (prometheus_client's multiprocess mode)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from api_helpers import REDIS_TEST_URL, database, platform_env, valid_config
from prometheus_client.parser import text_string_to_metric_families

from training_platform.db import crud
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _requests_total(text: str, route: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "tp_http_requests_total" and s.labels.get("route") == route
    )


def test_two_api_processes_share_state_and_metrics(data_dir, redis_client, tmp_path):
    multiproc = tmp_path / "prometheus"
    with database("sqlite", tmp_path) as url, platform_env(data_dir, url):
        with session_scope() as s:
            _user, token = crud.create_user(s, "mp-admin", is_admin=True)
        port = _free_port()
        env = {
            **os.environ,
            "TP_DATA_DIR": str(data_dir),
            "DATABASE_URL": url,
            "REDIS_URL": REDIS_TEST_URL,
            "TP_AUTH_MODE": "token",
            "PYTHONPATH": str(REPO),
            "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        }
        multiproc.mkdir()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "training_platform.api.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "2",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-3000:]
                time.sleep(0.3)
            # Both processes must be up before counting (uvicorn starts them one after the other).
            time.sleep(3)
            ids = []
            for i in range(10):  # new connections: the kernel spreads them over both processes
                r = httpx.post(
                    f"{base}/api/v1/jobs",
                    headers=headers,
                    timeout=30,
                    json={"name": f"mp-{i}", "config": valid_config()},
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            n = 40
            for i in range(n):
                r = httpx.get(f"{base}/api/v1/jobs/{ids[i % len(ids)]}", headers=headers, timeout=30)
                assert r.status_code == 200 and r.json()["id"] == ids[i % len(ids)]
            files = {p.name.rsplit("_", 1)[-1] for p in multiproc.iterdir() if p.name.startswith("counter_")}
            assert len(files) >= 2, f"one API process did all the work? {sorted(multiproc.iterdir())}"
            for _ in range(4):  # whichever process answers, it counts both
                text = httpx.get(f"{base}/metrics", timeout=30).text
                assert _requests_total(text, "/api/v1/jobs/{job_id}") == n
                assert _requests_total(text, "/api/v1/jobs") == 10
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
