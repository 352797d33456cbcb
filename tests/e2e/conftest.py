"""The platform the end-to-end tests talk to: one `tp up` per session on the embedded default (SQLite + embedded
Redis), with short heartbeat and schedule-tick intervals so the tests see recovery and schedules quickly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _e2e import running_tp_up


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """`tp up` in a fresh TP_DATA_DIR with no REDIS_URL / DATABASE_URL. Yields (API client, data dir)."""
    with running_tp_up(tmp_path_factory.mktemp("tp_up")) as (client, data_dir):
        yield client, data_dir


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
UI_BUILT = (Path(__file__).resolve().parents[2] / "training_platform/api/static/ui/index.html").is_file()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium here (apt-get install -y chromium; .ci/run installs it)")
    if not UI_BUILT:
        pytest.skip("the UI is not built (cd frontend && npm ci && npm run build)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()
