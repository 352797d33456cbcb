"""Helpers of the end-to-end tests (imported by the test modules; the `platform` fixture is in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def get_job(client: httpx.Client, job_id: int) -> dict:
    response = client.get(f"/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return response.json()


def job_ended(client: httpx.Client, job_id: int, timeout: float, what: str, interval: float = 0.5) -> dict:
    """The job once it succeeded, failed or was cancelled (AssertionError after `timeout` seconds)."""
    return wait(
        lambda: (j := get_job(client, job_id))["status"] in ("succeeded", "failed", "cancelled") and j,
        timeout,
        what,
        interval=interval,
    )


@contextlib.contextmanager
def running_tp_up(data_dir: Path, *args: str, **env_extra: str) -> Iterator[tuple[httpx.Client, Path]]:
    """`tp up` in `data_dir` with no REDIS_URL / DATABASE_URL (the embedded default), short heartbeat and schedule
    ticks, plus `env_extra`. Yields (an admin API client, the data dir); stops it (SIGTERM, then SIGKILL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(
        TP_DATA_DIR=str(data_dir),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TP_HEARTBEAT_INTERVAL="1",
        TP_SCHEDULE_TICK="1",
        TOKENIZERS_PARALLELISM="false",
        **env_extra,
    )
    log_path = data_dir / "tp_up.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "training_platform.cli", "up", "--port", str(port), "--grace", "30", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )
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


def wait_text(page, testid: str, text: str, timeout: float = 15_000) -> None:
    """Wait until the element with `data-testid=testid` shows `text` (Playwright, in the page)."""
    page.wait_for_function(
        f"document.querySelector('[data-testid=\"{testid}\"]')?.innerText.includes({text!r})", timeout=timeout
    )
