"""evaluations, eval schedules, best checkpoint

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 09:26:45.089212
"""

# Alembic's revision layout (header, create_table calls) repeats in every revision on purpose: a revision is frozen
# once released, so revisions share no code (the duplicates tool's migration pairs are this).
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_schedules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("trigger", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("cron", sqlmodel.sql.sqltypes.AutoString(length=120), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("every_n", sa.Integer(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("keep_best_by", sqlmodel.sql.sqltypes.AutoString(length=130), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("next_fire_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("last_fired_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("last_checkpoint_step", sa.Integer(), nullable=False),
        sa.Column("fired_count", sa.Integer(), nullable=False),
        sa.Column("last_message", sa.Text(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("eval_schedules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_eval_schedules_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_eval_schedules_next_fire_at"), ["next_fire_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_eval_schedules_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "evaluations",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("model_label", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("model_path", sa.Text(), nullable=False),
        sa.Column("source_job_id", sa.Integer(), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("schedule_id", sa.Integer(), nullable=True),
        sa.Column("benchmarks", sa.JSON(), nullable=False),
        sa.Column("keep_best_by", sqlmodel.sql.sqltypes.AutoString(length=130), nullable=True),
        sa.Column("output_dir", sa.Text(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
        ),
        sa.PrimaryKeyConstraint("job_id"),
    )
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evaluations_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_evaluations_schedule_id"), ["schedule_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_evaluations_source_job_id"), ["source_job_id"], unique=False)

    op.create_table(
        "eval_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("benchmark", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("metric", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("stderr", sa.Float(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["evaluations.job_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "benchmark", "metric", name="uq_eval_metric"),
    )
    with op.batch_alter_table("eval_metrics", schema=None) as batch_op:
        batch_op.create_index("ix_eval_metrics_benchmark_metric", ["benchmark", "metric"], unique=False)
        batch_op.create_index(batch_op.f("ix_eval_metrics_job_id"), ["job_id"], unique=False)

    op.create_table(
        "eval_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("benchmark", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("sample_index", sa.Integer(), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=True),
        sa.Column("extracted", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["evaluations.job_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("eval_samples", schema=None) as batch_op:
        batch_op.create_index(
            "ix_eval_samples_job_benchmark_position", ["job_id", "benchmark", "position"], unique=False
        )

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("best_checkpoint", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("best_checkpoint")

    with op.batch_alter_table("eval_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_eval_samples_job_benchmark_position")

    op.drop_table("eval_samples")
    with op.batch_alter_table("eval_metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_metrics_job_id"))
        batch_op.drop_index("ix_eval_metrics_benchmark_metric")

    op.drop_table("eval_metrics")
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evaluations_source_job_id"))
        batch_op.drop_index(batch_op.f("ix_evaluations_schedule_id"))
        batch_op.drop_index(batch_op.f("ix_evaluations_owner_id"))

    op.drop_table("evaluations")
    with op.batch_alter_table("eval_schedules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_schedules_owner_id"))
        batch_op.drop_index(batch_op.f("ix_eval_schedules_next_fire_at"))
        batch_op.drop_index(batch_op.f("ix_eval_schedules_job_id"))

    op.drop_table("eval_schedules")
