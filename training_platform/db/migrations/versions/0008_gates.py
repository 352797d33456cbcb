"""gates: quality-gate profiles (admin-defined) and gate reports of dataset versions

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 12:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gate_profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gate_profiles", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gate_profiles_name"), ["name"], unique=True)

    op.create_table(
        "gate_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("profile_name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("profile_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gate_reports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gate_reports_dataset_version_id"), ["dataset_version_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_gate_reports_sha256"), ["sha256"], unique=False)
        batch_op.create_index(batch_op.f("ix_gate_reports_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_gate_reports_created_at"), ["created_at"], unique=False)
        batch_op.create_index("ix_gate_reports_version_profile", ["dataset_version_id", "profile_name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("gate_reports", schema=None) as batch_op:
        batch_op.drop_index("ix_gate_reports_version_profile")
        batch_op.drop_index(batch_op.f("ix_gate_reports_created_at"))
        batch_op.drop_index(batch_op.f("ix_gate_reports_job_id"))
        batch_op.drop_index(batch_op.f("ix_gate_reports_sha256"))
        batch_op.drop_index(batch_op.f("ix_gate_reports_dataset_version_id"))
    op.drop_table("gate_reports")
    with op.batch_alter_table("gate_profiles", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gate_profiles_name"))
    op.drop_table("gate_profiles")
