"""datasets and content-addressed dataset versions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 10:00:00.000000
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("current_version_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "name", name="uq_dataset_owner_name"),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_datasets_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("format", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("audit", sa.JSON(), nullable=True),
        sa.Column("parent_version_id", sa.Integer(), nullable=True),
        sa.Column("operation", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("recipe", sa.JSON(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"]),
        sa.ForeignKeyConstraint(["parent_version_id"], ["dataset_versions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dataset_id", "sha256", name="uq_dataset_version_sha"),
    )
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_dataset_versions_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_dataset_versions_sha256"), ["sha256"], unique=False)
        batch_op.create_index(batch_op.f("ix_dataset_versions_parent_version_id"), ["parent_version_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_dataset_versions_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("dataset_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_versions_job_id"))
        batch_op.drop_index(batch_op.f("ix_dataset_versions_parent_version_id"))
        batch_op.drop_index(batch_op.f("ix_dataset_versions_sha256"))
        batch_op.drop_index(batch_op.f("ix_dataset_versions_dataset_id"))
    op.drop_table("dataset_versions")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_datasets_owner_id"))
    op.drop_table("datasets")
