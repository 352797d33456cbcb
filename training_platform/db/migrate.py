"""Alembic, driven from code: `tp db upgrade` and `tp up` call `upgrade()`; no alembic.ini needed."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from training_platform.core.settings import get_settings


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "training_platform.db:migrations")
    cfg.set_main_option("sqlalchemy.url", (url or get_settings().db_url).replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    if url is None:
        get_settings().data_path.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)


def current(url: str | None = None) -> None:
    command.current(alembic_config(url), verbose=False)
