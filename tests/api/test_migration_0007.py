"""Migration 0007 (webhooks) upgrades from 0006, matches the model, downgrades cleanly; one head."""

from __future__ import annotations

import pytest
from alembic.script import ScriptDirectory
from api_helpers import database
from sqlalchemy import inspect, text

from training_platform.db.migrate import alembic_config, upgrade
from training_platform.db.models import Webhook
from training_platform.db.session import make_engine

pytestmark = pytest.mark.integration


def test_single_head_after_0007():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_revision("0007").down_revision == "0006"
    assert len(script.get_heads()) == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0007_up_down(kind, tmp_path):
    from alembic import command

    with database(kind, tmp_path) as url:
        upgrade(url, "0006")
        engine = make_engine(url)
        try:
            assert "webhooks" not in inspect(engine).get_table_names()
            with engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO users (name, is_admin, created_at) VALUES ('u', false, CURRENT_TIMESTAMP)")
                )
            upgrade(url, "0007")
            columns = {c["name"] for c in inspect(engine).get_columns("webhooks")}
            assert columns == set(Webhook.model_fields)
            with engine.begin() as conn:
                uid = conn.execute(text("SELECT id FROM users")).scalar_one()
                conn.execute(
                    text(
                        "INSERT INTO webhooks (owner_id, url, events, created_at) VALUES "
                        "(:u, 'https://h.example/x', '[\"job.failed\"]', CURRENT_TIMESTAMP)"
                    ),
                    {"u": uid},
                )
                assert conn.execute(text("SELECT last_attempts FROM webhooks")).scalar_one() == 0
            command.downgrade(alembic_config(url), "0006")
            assert "webhooks" not in inspect(engine).get_table_names()
            upgrade(url, "head")
        finally:
            engine.dispose()
