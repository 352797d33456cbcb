"""Migration 0005 builds the rollup tiers of metric points stored before it, exactly as the application would."""

from __future__ import annotations

import pytest
from api_helpers import database
from sqlalchemy import text

from training_platform.db import rollups
from training_platform.db.migrate import upgrade
from training_platform.db.session import make_engine

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_0005_backfills_rollups(kind, tmp_path):
    with database(kind, tmp_path) as url:
        upgrade(url, "0004")
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO users (name, is_admin, created_at) VALUES ('u', false, CURRENT_TIMESTAMP)")
                )
                uid = conn.execute(text("SELECT id FROM users")).scalar_one()
                for name in ("a", "b"):
                    conn.execute(
                        text(
                            "INSERT INTO jobs (owner_id, name, kind, algorithm, status, priority, attempts, "
                            "current_step, config, cancel_requested, created_at, updated_at) VALUES (:u, :n, 'train', "
                            "'sft', 'succeeded', 0, 0, 0, '{}', false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                        ),
                        {"u": uid, "n": name},
                    )
                jobs = [r[0] for r in conn.execute(text("SELECT id FROM jobs ORDER BY id"))]
                rows = [
                    {"j": j, "n": n, "s": s, "v": ((s * 7919 + j) % 1013) / 7.0}
                    for j in jobs
                    for n in ("loss", "lr")
                    for s in range(0, 30_000, 3 if n == "lr" else 1)
                ]
                conn.execute(
                    text(
                        "INSERT INTO metric_points (job_id, name, step, value, ts) "
                        "VALUES (:j, :n, :s, :v, CURRENT_TIMESTAMP)"
                    ),
                    rows,
                )
            upgrade(url, "0005")
            query = text(
                "SELECT job_id, name, width, bucket, min_value, min_step, max_value, max_step "
                "FROM metric_rollups ORDER BY 1, 2, 3, 4"
            )
            with engine.connect() as conn:
                migrated = conn.execute(query).all()
            from sqlmodel import Session

            with Session(engine) as session:
                for j in jobs:
                    rollups.rebuild(session, j)
                session.commit()
            with engine.connect() as conn:
                rebuilt = conn.execute(query).all()
            assert len(migrated) > 1000 and migrated == rebuilt
        finally:
            engine.dispose()
