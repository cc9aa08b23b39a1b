"""Metric chunks know their last step: metric_chunks.last_step, indexed with job_id.

A reader that already holds a series up to step N (GET /v1/jobs/{id}/metrics?since_step=N, the
dashboard's live job page) reads only the chunks with last_step > N: a range of the index
(job_id, last_step) instead of every chunk of the job. The column is filled in on insert from the
chunk's steps (ntklab.store.models); chunks stored before are filled in here. Only a column and an index
are added (no table rebuild on SQLite, see 0005).

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

chunks = sa.table(
    "metric_chunks", sa.column("id", sa.Integer), sa.column("steps", sa.JSON), sa.column("last_step", sa.Integer)
)


def upgrade() -> None:
    op.add_column("metric_chunks", sa.Column("last_step", sa.Integer(), nullable=True))
    connection = op.get_bind()
    filled = [
        {"chunk_id": chunk_id, "last": steps[-1]}
        for chunk_id, steps in connection.execute(sa.select(chunks.c.id, chunks.c.steps))
        if steps
    ]
    if filled:
        connection.execute(
            sa.update(chunks).where(chunks.c.id == sa.bindparam("chunk_id")).values(last_step=sa.bindparam("last")),
            filled,
        )
    op.create_index("ix_metric_chunks_job_id_last_step", "metric_chunks", ["job_id", "last_step"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_metric_chunks_job_id_last_step", table_name="metric_chunks")
    op.drop_column("metric_chunks", "last_step")
