"""Dataset test fixtures: a private TP_DATA_DIR per module (the demo assets linked in), a migrated database, the real
local Redis on its own db index (12), and the API on a TestClient. The environment machinery is the API tests'
(`tests/api/api_helpers.py`); worker processes are started like in the worker tests (`tests/workers/_wk.py`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for shared in (HERE.parent / "api", HERE.parent / "workers"):
    if str(shared) not in sys.path:
        sys.path.append(str(shared))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ds_helpers import REDIS_URL, api_context  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory) -> Path:
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_ds_demo")
    prepare_demo(root)
    return root / "demo"


@pytest.fixture(scope="session")
def redis_client():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"the local Redis at {REDIS_URL} is unreachable: {exc}")
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, demo_assets) -> Path:
    """TP_DATA_DIR: demo/ (linked), a symlink escaping it (escape -> /etc); nothing else, so the tests can check
    exactly what the dataset store holds."""
    root = tmp_path_factory.mktemp("tp_ds_data").resolve()
    (root / "demo").symlink_to(demo_assets)
    (root / "escape").symlink_to("/etc")
    return root


@pytest.fixture(scope="module")
def outside_dir(tmp_path_factory) -> Path:
    """A directory outside every allowed root."""
    return tmp_path_factory.mktemp("tp_ds_outside").resolve()


@pytest.fixture(scope="module")
def api(data_dir, redis_client, tmp_path_factory):
    """The API on SQLite (a fresh database per module)."""
    with api_context(data_dir, "sqlite", tmp_path_factory.mktemp("ds_db")) as api:
        yield api
