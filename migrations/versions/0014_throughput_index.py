"""Measured throughput: an index on jobs (status, device, finished_at).

The dry run calibrates its estimate per worker class from that class's newest succeeded jobs
(store/throughput.py): the distinct devices of succeeded jobs, then per class the newest few by
finished_at, both read from this index.

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_status_device_finished_at", "jobs", ["status", "device", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_device_finished_at", table_name="jobs")
