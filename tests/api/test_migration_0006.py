"""Migration 0006 (sweeps, job templates, jobs.sweep_id): existing jobs survive, the schema matches the models, and
it downgrades cleanly. On SQLite `jobs` keeps its AUTOINCREMENT (the column is added without rebuilding the table)."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.command import downgrade
from alembic.migration import MigrationContext
from api_helpers import database
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from training_platform.db import models  # noqa: F401 - the tables on SQLModel.metadata
from training_platform.db.migrate import alembic_config, upgrade
from training_platform.db.session import make_engine

pytestmark = pytest.mark.integration

OURS = {"sweeps", "job_templates"}


def _our_diffs(conn) -> list:
    """Differences between the database and the models that concern 0006's tables and column."""
    diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": False}), SQLModel.metadata)
    flat = [d for item in diffs for d in (item if isinstance(item, list) else [item])]
    out = []
    for d in flat:
        text_ = repr(d)
        if any(t in text_ for t in OURS) or "sweep_id" in text_:
            out.append(d)
    return out


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0006_adds_sweeps_and_templates(kind, tmp_path):
    with database(kind, tmp_path) as url:
        upgrade(url, "0005")
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO users (name, is_admin, created_at) VALUES ('u', false, CURRENT_TIMESTAMP)")
                )
                uid = conn.execute(text("SELECT id FROM users")).scalar_one()
                conn.execute(
                    text(
                        "INSERT INTO jobs (owner_id, name, kind, algorithm, status, priority, attempts, current_step, "
                        "config, cancel_requested, created_at, updated_at) VALUES (:u, 'old', 'train', 'sft', "
                        "'succeeded', 0, 0, 0, '{}', false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            upgrade(url, "0006")
            with engine.connect() as conn:
                insp = inspect(conn)
                assert set(insp.get_table_names()) >= OURS
                assert "ix_jobs_sweep_id" in {i["name"] for i in insp.get_indexes("jobs")}
                assert conn.execute(text("SELECT name, sweep_id FROM jobs")).all() == [("old", None)]
                assert _our_diffs(conn) == []
                if kind == "sqlite":
                    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
                    assert "AUTOINCREMENT" in ddl
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO job_templates (owner_id, name, description, config, created_at, "
                        "updated_at) VALUES (:u, 't', '', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
                assert conn.execute(text("SELECT shared FROM job_templates")).scalar_one() in (False, 0)
            with pytest.raises(Exception, match="(?i)unique"), engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO job_templates (owner_id, name, description, config, created_at, "
                        "updated_at) VALUES (:u, 't', '', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
            engine.dispose()
            downgrade(alembic_config(url), "0005")
            with engine.connect() as conn:
                insp = inspect(conn)
                assert not OURS & set(insp.get_table_names())
                assert "sweep_id" not in {c["name"] for c in insp.get_columns("jobs")}
                assert conn.execute(text("SELECT name FROM jobs")).all() == [("old",)]
                if kind == "sqlite":
                    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'jobs'")).scalar_one()
                    assert "AUTOINCREMENT" in ddl
            engine.dispose()
            upgrade(url, "0006")
        finally:
            engine.dispose()
