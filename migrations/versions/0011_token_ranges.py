"""Token ranges: an integer data set's smallest and largest x, and an ONNX model's vocabulary.

datasets.x_min / x_max: the extremes of an integer x, read at upload (service/array_upload.py), so a job
whose token ids fall outside its model's embedding is refused at submission (a 422 on data.id) instead
of failing in the worker. models.input_vocabulary: for an integer-input ONNX model, the least first
dimension over the embedding tables (Gather nodes) that read the input directly as indices
(service/onnx_upload.input_vocabulary). Nullable: float data sets, other models and rows stored
before this revision have none, and are checked as before. Only nullable columns are added (no table
rebuild on SQLite, see 0005).

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("datasets", "x_min"), ("datasets", "x_max"), ("models", "input_vocabulary"))


def upgrade() -> None:
    for table, column in COLUMNS:
        op.add_column(table, sa.Column(column, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for table, column in reversed(COLUMNS):
        op.drop_column(table, column)
