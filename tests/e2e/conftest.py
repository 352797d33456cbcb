"""The platform the end-to-end tests talk to: one `tp up` per session on the embedded default (SQLite + embedded
Redis), with short heartbeat and schedule-tick intervals so the tests see recovery and schedules quickly."""

from __future__ import annotations

import pytest
from _e2e import running_tp_up


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """`tp up` in a fresh TP_DATA_DIR with no REDIS_URL / DATABASE_URL. Yields (API client, data dir)."""
    with running_tp_up(tmp_path_factory.mktemp("tp_up")) as (client, data_dir):
        yield client, data_dir
