"""Fixtures for the worker tests: a private TP_DATA_DIR + database per module, real local Redis (db 14, flushed
per module) and real `celery worker` processes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _wk import PG_ADMIN_URL, REDIS_URL, Platform


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory) -> Path:
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_demo")
    prepare_demo(root)
    return root / "demo"


@pytest.fixture(scope="module")
def database_url(tmp_path_factory) -> Iterator[str]:
    """SQLite file database; test modules override this fixture for PostgreSQL."""
    yield f"sqlite:///{tmp_path_factory.mktemp('tp_db') / 'platform.db'}"


@pytest.fixture(scope="module")
def platform(tmp_path_factory, demo_assets, database_url) -> Iterator[Platform]:
    redis = pytest.importorskip("redis")
    try:
        client = redis.Redis.from_url(REDIS_URL)
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    client.flushdb()

    data_dir = tmp_path_factory.mktemp("tp_workers")
    (data_dir / "demo").symlink_to(demo_assets)
    env_vars = {
        "TP_DATA_DIR": str(data_dir),
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "TP_HEARTBEAT_INTERVAL": "1",
        "TP_METRICS_BATCH_INTERVAL": "0.5",
        "TP_MIN_FREE_DISK_MB": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",  # a ~1M-parameter model on 2 shared cores: threads only contend
    }
    from training_platform.taskqueue.app import app

    original_broker = app.conf.broker_url
    mp = pytest.MonkeyPatch()
    for key, value in env_vars.items():
        mp.setenv(key, value)
    _reset_caches(REDIS_URL)

    from training_platform.db.migrate import upgrade

    upgrade()
    plat = Platform(data_dir=data_dir, database_url=database_url, env=dict(os.environ))
    try:
        yield plat
    finally:
        plat.stop_all()
        from training_platform.db.session import get_engine

        get_engine().dispose()
        mp.undo()
        _reset_caches(original_broker)
        client.flushdb()


def _reset_caches(broker_url: str) -> None:
    from training_platform.core.settings import get_settings
    from training_platform.db.session import get_engine
    from training_platform.taskqueue.app import app

    if get_engine.cache_info().currsize:
        get_engine().dispose()
    get_settings.cache_clear()
    get_engine.cache_clear()
    app.conf.broker_url = broker_url
    # Connections are made lazily; drop any pool made for another URL.
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database `tp_test_<random>`, dropped afterwards (skips if PostgreSQL is unreachable)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"tp_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001
        admin.dispose()
        pytest.skip(f"PostgreSQL unreachable at {PG_ADMIN_URL}: {type(exc).__name__}: {str(exc)[:200]}")
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
