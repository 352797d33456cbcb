"""Alembic environment: the URL comes from the caller (training_platform.db.migrate) or the settings."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from training_platform.db import models  # noqa: F401 - registers the tables on SQLModel.metadata
from training_platform.db.session import make_engine

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("no sqlalchemy.url: run the migrations through training_platform.db.migrate")
    engine = make_engine(url)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # Batch mode recreates tables (copy, drop, rename); with foreign keys on, dropping a referenced table
            # fails. The pragma only takes effect outside a transaction, hence here, before alembic's.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        # batch mode lets ALTERs work on SQLite too
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
