"""The platform the end-to-end tests talk to: one `tp up` per session on the embedded default (SQLite + embedded
Redis), with short heartbeat and schedule-tick intervals so the tests see recovery and schedules quickly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _e2e import free_port, wait

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """`tp up` in a fresh TP_DATA_DIR with no REDIS_URL / DATABASE_URL. Yields (API client, data dir)."""
    data_dir = tmp_path_factory.mktemp("tp_up")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(TP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TP_HEARTBEAT_INTERVAL="1", TP_SCHEDULE_TICK="1", TOKENIZERS_PARALLELISM="false")
    log_path = data_dir / "tp_up.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "training_platform.cli", "up", "--port", str(port),
                                 "--grace", "30"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def healthy():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait(healthy, 180, "the API to answer /health", interval=0.5)
        token = (data_dir / "admin.token").read_text().strip()
        client = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        yield client, data_dir
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
