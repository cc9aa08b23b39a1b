"""Label ranges: an integer y's smallest and largest value.

datasets.y_min / y_max: the extremes of an integer y, read at upload (service/array_upload.py), so a job
whose class labels fall outside its model's outputs is refused at submission (a 422 on data.id naming
the output width) and a built-in model's output width defaults to y_max + 1 classes. Nullable: float y
and rows stored before this revision have none (such a job must then give model.output_dim). Only
nullable columns are added (no table rebuild on SQLite, see 0005).

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("y_min", "y_max")


def upgrade() -> None:
    for column in COLUMNS:
        op.add_column("datasets", sa.Column(column, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        op.drop_column("datasets", column)
