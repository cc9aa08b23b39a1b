"""Initial schema: api_keys, sweeps, jobs, job_tags, metric_chunks, artifacts.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 21:10:19.292462

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_hash"),
    )
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_sweeps_owner"), "sweeps", ["owner"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("sweep_id", sa.String(length=40), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("parameters", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("progress_step", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("progress_phase", sa.String(length=32), nullable=False),
        sa.Column("progress_eta_s", sa.Float(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sa.UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
    )
    op.create_index(op.f("ix_jobs_owner"), "jobs", ["owner"], unique=False)
    op.create_index(op.f("ix_jobs_status"), "jobs", ["status"], unique=False)
    op.create_index("ix_jobs_status_heartbeat", "jobs", ["status", "heartbeat_at"], unique=False)
    op.create_index(op.f("ix_jobs_sweep_id"), "jobs", ["sweep_id"], unique=False)

    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "name", name="uq_artifacts_job_name"),
    )
    op.create_index(op.f("ix_artifacts_job_id"), "artifacts", ["job_id"], unique=False)

    op.create_table(
        "job_tags",
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "tag"),
    )
    op.create_index(op.f("ix_job_tags_tag"), "job_tags", ["tag"], unique=False)

    op.create_table(
        "metric_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "name", "chunk", name="uq_metric_chunks_job_name_chunk"),
    )
    op.create_index(op.f("ix_metric_chunks_job_id"), "metric_chunks", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_metric_chunks_job_id"), table_name="metric_chunks")

    op.drop_table("metric_chunks")
    op.drop_index(op.f("ix_job_tags_tag"), table_name="job_tags")

    op.drop_table("job_tags")
    op.drop_index(op.f("ix_artifacts_job_id"), table_name="artifacts")

    op.drop_table("artifacts")
    op.drop_index(op.f("ix_jobs_sweep_id"), table_name="jobs")
    op.drop_index("ix_jobs_status_heartbeat", table_name="jobs")
    op.drop_index(op.f("ix_jobs_status"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_owner"), table_name="jobs")

    op.drop_table("jobs")
    op.drop_index(op.f("ix_sweeps_owner"), table_name="sweeps")

    op.drop_table("sweeps")
    op.drop_table("api_keys")
