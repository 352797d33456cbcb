"""runs table: jobs.tags (JSON list) and jobs.note (text), and saved_views (a user's named views of a UI page)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-09 12:00:00
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs with server defaults (existing jobs get [] and ""): SQLite does not rebuild `jobs`, whose
    # AUTOINCREMENT (set by 0004) a rebuild would have to carry over.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tags", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("note", sa.Text(), nullable=False, server_default=""))

    op.create_table(
        "saved_views",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("page", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("query", sa.JSON(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "page", "name", name="uq_saved_view_owner_page_name"),
    )
    with op.batch_alter_table("saved_views", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_saved_views_owner_id"), ["owner_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("saved_views", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_saved_views_owner_id"))
    op.drop_table("saved_views")
    if op.get_bind().dialect.name == "sqlite":
        # DROP COLUMN natively (SQLite >= 3.35): batch mode would rebuild `jobs` and lose its AUTOINCREMENT.
        op.execute("ALTER TABLE jobs DROP COLUMN note")
        op.execute("ALTER TABLE jobs DROP COLUMN tags")
    else:
        op.drop_column("jobs", "note")
        op.drop_column("jobs", "tags")
