"""security: named endpoints, shared models/datasets, job ids never reused on SQLite

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 16:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "endpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("api_key_env", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_endpoints_name"), ["name"], unique=True)
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("shared", sa.Boolean(), nullable=False, server_default=sa.false()))
    if op.get_bind().dialect.name == "sqlite":
        # INTEGER PRIMARY KEY hands out max(id)+1, so deleting the newest job would free its id for the next one
        # (and a schedule or a link to the old job would then point at a stranger's). AUTOINCREMENT never reuses.
        with op.batch_alter_table("jobs", recreate="always", table_kwargs={"sqlite_autoincrement": True}) as batch_op:
            pass


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("shared")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("shared")
    with op.batch_alter_table("endpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_endpoints_name"))
    op.drop_table("endpoints")
