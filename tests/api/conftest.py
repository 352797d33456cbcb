"""API test fixtures: a private TP_DATA_DIR with the demo assets, a migrated database (SQLite file, or a fresh
PostgreSQL database), the real local Redis (db 15), users with tokens, and a TestClient on a fresh app.
The environment machinery itself lives in `api_helpers.py` (tests import from there, never from a conftest).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from api_helpers import REDIS_TEST_URL, Api, database, running_api  # noqa: E402


def pytest_configure(config):
    # Starlette's TestClient announces its move to httpx2; not ours to act on.
    config.addinivalue_line("filterwarnings", "ignore:Using `httpx` with `starlette.testclient`")


# ---------------------------------------------------------------------------------------------- services


@pytest.fixture(scope="session")
def redis_client():
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"the local Redis at {REDIS_TEST_URL} is unreachable: {exc}")
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """TP_DATA_DIR with demo/{model,reward_model,data}, runs/ and a symlink escaping it (escape -> /etc)."""
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_api_data")
    prepare_demo(root)
    (root / "escape").symlink_to("/etc")
    (root / "runs").mkdir()
    return root.resolve()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db_url(request, tmp_path_factory) -> Iterator[str]:
    """A migrated-to-be database URL: a SQLite file, or a fresh PostgreSQL database `tp_test_<random>` on
    127.0.0.1 (dropped afterwards; the param is skipped when the server is unreachable)."""
    with database(request.param, tmp_path_factory.mktemp(f"db_{request.param}")) as url:
        yield url


@pytest.fixture(scope="module")
def api(db_url, data_dir, redis_client) -> Iterator[Api]:
    """The API on SQLite and on PostgreSQL (modules using this fixture run once per database)."""
    with running_api(data_dir, db_url) as api:
        yield api


@pytest.fixture(scope="module")
def sqlite_api(data_dir, redis_client, tmp_path_factory) -> Iterator[Api]:
    with database("sqlite", tmp_path_factory.mktemp("db_sqlite")) as url, running_api(data_dir, url) as api:
        yield api
