"""sharing the devices: jobs.queued_at/pool/device/devices, user_quotas, usage_records, compute_pools

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-10 12:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_JOB_COLUMNS = ("devices", "device", "pool", "queued_at")


def upgrade() -> None:
    # Plain nullable ADD COLUMNs: SQLite does not rebuild `jobs` (whose AUTOINCREMENT a rebuild would lose).
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queued_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))
        batch_op.add_column(sa.Column("device", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True))
        batch_op.add_column(sa.Column("devices", sa.Integer(), nullable=True))
    # Jobs waiting at upgrade time count their wait from their last change.
    op.execute("UPDATE jobs SET queued_at = updated_at WHERE status = 'queued'")

    op.create_table(
        "user_quotas",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("max_devices", sa.Integer(), nullable=True),
        sa.Column("max_running_jobs", sa.Integer(), nullable=True),
        sa.Column("device_hours_per_week", sa.Float(), nullable=True),
        sa.Column("updated_by", sa.Integer(), nullable=True),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["updated_by"], ["users.id"]),
        sa.PrimaryKeyConstraint("user_id"),
    )
    op.create_table(
        "usage_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("pool", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("device", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("cpu_seconds", sa.Float(), nullable=False),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sampled_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_usage_records_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_usage_records_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_usage_records_started_at"), ["started_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_usage_records_ended_at"), ["ended_at"], unique=False)
    op.create_table(
        "compute_pools",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("compute_pools")
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        for column in ("ended_at", "started_at", "owner_id", "job_id"):
            batch_op.drop_index(batch_op.f(f"ix_usage_records_{column}"))
    op.drop_table("usage_records")
    op.drop_table("user_quotas")
    if op.get_bind().dialect.name == "sqlite":
        # DROP COLUMN natively (SQLite >= 3.35): batch mode would rebuild `jobs` and lose its AUTOINCREMENT.
        for column in _JOB_COLUMNS:
            op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    else:
        for column in _JOB_COLUMNS:
            op.drop_column("jobs", column)
