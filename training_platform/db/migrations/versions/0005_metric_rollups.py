"""metric rollups: min/max per aligned step bucket (widths 64 .. 4**10), for fast charts of long runs

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 16:10:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

WIDTHS = tuple(4**k for k in range(3, 11))

# The same computation as training_platform.db.rollups, for every job at once (a copy: a migration must not change
# when the application code does).
_FROM_POINTS = """
INSERT INTO metric_rollups (job_id, name, width, bucket, min_value, min_step, max_value, max_step)
SELECT a.job_id, a.name, :width, a.b, a.mn,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = a.job_id AND m.name = a.name AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width
          AND m.value = a.mn),
       a.mx,
       (SELECT MIN(m.step) FROM metric_points AS m
        WHERE m.job_id = a.job_id AND m.name = a.name AND m.step >= a.b * :width AND m.step < (a.b + 1) * :width
          AND m.value = a.mx)
FROM (SELECT job_id, name, CAST(step AS BIGINT) / :width AS b, MIN(value) AS mn, MAX(value) AS mx
      FROM metric_points WHERE step >= 0
      GROUP BY job_id, name, CAST(step AS BIGINT) / :width) AS a
"""

_FROM_CHILDREN = """
INSERT INTO metric_rollups (job_id, name, width, bucket, min_value, min_step, max_value, max_step)
SELECT a.job_id, a.name, :width, a.b, a.mn,
       (SELECT MIN(r.min_step) FROM metric_rollups AS r
        WHERE r.job_id = a.job_id AND r.name = a.name AND r.width = :child AND r.bucket >= a.b * 4
          AND r.bucket < a.b * 4 + 4 AND r.min_value = a.mn),
       a.mx,
       (SELECT MIN(r.max_step) FROM metric_rollups AS r
        WHERE r.job_id = a.job_id AND r.name = a.name AND r.width = :child AND r.bucket >= a.b * 4
          AND r.bucket < a.b * 4 + 4 AND r.max_value = a.mx)
FROM (SELECT job_id, name, bucket / 4 AS b, MIN(min_value) AS mn, MAX(max_value) AS mx
      FROM metric_rollups WHERE width = :child
      GROUP BY job_id, name, bucket / 4) AS a
"""


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=False),
        sa.Column("min_step", sa.Integer(), nullable=False),
        sa.Column("max_value", sa.Float(), nullable=False),
        sa.Column("max_step", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "name", "width", "bucket"),
    )
    bind = op.get_bind()
    bind.execute(sa.text(_FROM_POINTS), {"width": WIDTHS[0]})
    for child, width in zip(WIDTHS, WIDTHS[1:], strict=False):
        bind.execute(sa.text(_FROM_CHILDREN), {"width": width, "child": child})


def downgrade() -> None:
    op.drop_table("metric_rollups")
