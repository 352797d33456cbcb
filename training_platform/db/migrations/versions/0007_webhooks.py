"""webhooks: a user's job-end notifications (URL on an operator-allowed host, events, write-only secret, last
delivery outcome)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 12:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_delivery_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("last_event", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("last_job_id", sa.Integer(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_webhooks_owner_id"), ["owner_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhooks_owner_id"))
    op.drop_table("webhooks")
