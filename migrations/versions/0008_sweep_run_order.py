"""A sweep's jobs run largest first: jobs.run_order.

Workers take an owner's queued jobs by `coalesce(run_order, seq)` (store/fairness.py). A job
submitted on its own keeps run_order NULL (its seq); a sweep's jobs get their own seqs handed
out again by parameter count, largest first (store/sweeps_repo.py), so a sweep over widths
starts its widest nets first instead of last, and its table stays in grid order (seq). Jobs
stored before keep NULL: they run in grid order as they did. Only a nullable column is added
(no table rebuild on SQLite, see 0005).

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("run_order", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "run_order")
