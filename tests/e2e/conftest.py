"""The platform the end-to-end tests talk to: one `tp up` per session on the embedded default (SQLite + embedded
Redis), with short heartbeat and schedule-tick intervals so the tests see recovery and schedules quickly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _e2e import running_tp_up


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """`tp up` in a fresh TP_DATA_DIR with no REDIS_URL / DATABASE_URL. Yields (API client, data dir). One training
    worker process: this unit runs on one core (tests/conftest.py), where two jobs side by side (the default on a
    2-device node) only make each slower; tests/e2e/test_sharing_http.py runs jobs side by side on its own `tp up`."""
    with running_tp_up(tmp_path_factory.mktemp("tp_up"), TP_WORKER_CONCURRENCY="1") as (client, data_dir):
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


@pytest.fixture
def signed_in_page(browser, platform):
    """A Chromium page signed in as the admin on the jobs list; fails the test on any browser error (a 401 before
    the token is set is expected). `page.root` is the platform's base URL."""
    client, data_dir = platform
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if msg.type == "error" and "status of 401" not in msg.text else None,
    )
    root = str(client.base_url).removesuffix("/api/v1/").removesuffix("/api/v1")
    token = (data_dir / "admin.token").read_text().strip()
    page.goto(f"{root}/ui/#/jobs")
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("token-save").click()
    page.get_by_test_id("jobs-table").wait_for()
    page.get_by_test_id("login-card").wait_for(state="detached")
    page.root = root  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not errors, f"browser errors: {errors}"
