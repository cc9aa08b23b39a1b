"""A job's estimate, stored once: jobs.estimate.

The estimate (planner/estimate.py) is computed when a job is submitted, at that deployment's rates,
and stored on the row (store/job_estimates.py has the document's shape); GET /v1/jobs/{id} and the
worker's memory check read it instead of computing it again. Nullable, no backfill: a job stored before
this revision (and one whose model cannot be planned) has none, and its readers compute it from the spec
as they did before. Only a nullable column is added (no table rebuild on SQLite, see 0005).

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("estimate", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "estimate")
