"""A job's warnings in a column of their own, out of its summary.

Until now the worker stored the run's warnings inside the summary, under the key "warnings", and
every reader split them out. Upgrade adds jobs.warnings and moves each stored list there (the
summary keeps its scalars); downgrade puts each list back under the summary's "warnings" key and
drops the column. Rows are moved in Python through SQLAlchemy's JSON type, so SQLite and
PostgreSQL take the same path.

Revision ID: 0016
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STORED_KEY = "warnings"
BATCH = 500

jobs = sa.table("jobs", sa.column("seq", sa.Integer), sa.column("summary", sa.JSON), sa.column("warnings", sa.JSON))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("warnings", sa.JSON(), nullable=True))
    for seq, summary, _ in _rows_with_summary():
        kept = {key: value for key, value in summary.items() if key != STORED_KEY}
        _write(seq, summary=kept, warnings=summary.get(STORED_KEY, []))


def downgrade() -> None:
    for seq, summary, warnings in _rows_with_summary():
        _write(seq, summary={**summary, STORED_KEY: warnings or []}, warnings=None)
    op.drop_column("jobs", "warnings")


def _rows_with_summary():
    """(seq, summary, warnings) of every job with a summary, read in batches of BATCH by seq."""
    connection, after = op.get_bind(), 0
    while True:
        rows = connection.execute(
            sa.select(jobs.c.seq, jobs.c.summary, jobs.c.warnings)
            .where(jobs.c.seq > after, jobs.c.summary.is_not(None))
            .order_by(jobs.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        for row in rows:
            if isinstance(row.summary, dict):
                yield row.seq, row.summary, row.warnings
        after = rows[-1].seq


def _write(seq: int, **values) -> None:
    op.get_bind().execute(sa.update(jobs).where(jobs.c.seq == seq).values(**values))
