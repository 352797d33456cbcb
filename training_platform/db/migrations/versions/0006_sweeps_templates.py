"""sweeps (one job per grid point and seed, grouped by jobs.sweep_id) and job templates (named configs)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 10:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("grid", sa.JSON(), nullable=False),
        sa.Column("seeds", sa.JSON(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sweeps_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_sweeps_created_at"), ["created_at"], unique=False)

    op.create_table(
        "job_templates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "name", name="uq_job_template_owner_name"),
    )
    with op.batch_alter_table("job_templates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_templates_owner_id"), ["owner_id"], unique=False)

    # A plain ADD COLUMN + CREATE INDEX (no foreign key): SQLite does not rebuild `jobs` (whose AUTOINCREMENT,
    # set by 0004, a rebuild would have to carry over).
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_jobs_sweep_id"), ["sweep_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_sweep_id"))
    if op.get_bind().dialect.name == "sqlite":
        # DROP COLUMN natively (SQLite >= 3.35): batch mode would rebuild `jobs` and lose its AUTOINCREMENT.
        op.execute("ALTER TABLE jobs DROP COLUMN sweep_id")
    else:
        op.drop_column("jobs", "sweep_id")
    with op.batch_alter_table("job_templates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_templates_owner_id"))
    op.drop_table("job_templates")
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweeps_created_at"))
        batch_op.drop_index(batch_op.f("ix_sweeps_owner_id"))
    op.drop_table("sweeps")
