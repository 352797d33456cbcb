"""Database engine and sessions. SQLite (embedded default) and PostgreSQL run the same code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from training_platform.core.settings import get_settings


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # API, workers and beat write concurrently
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    # Sessions in UTC whatever the server's zone, so naive reads of timestamptz columns are UTC too.
    return create_engine(
        url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"options": "-c timezone=UTC"}
    )


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    settings.data_path.mkdir(parents=True, exist_ok=True)
    return make_engine(settings.db_url)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session that commits on success and rolls back on error (workers, CLI)."""
    with Session(get_engine(), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def get_session() -> Iterator[Session]:
    """FastAPI dependency."""
    with Session(get_engine(), expire_on_commit=False) as session:
        yield session
